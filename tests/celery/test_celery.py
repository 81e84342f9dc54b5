"""Celery end to end over kombu's SQS transport against a real 3-node cmq cluster.

A real ``celery worker`` process (tests/celery/worker_app.py) consumes a queue created with a
RedrivePolicy; the test sends tasks through the same transport. Checked: every task sent runs
(send, execute, ack), with the leader of the queue's data group killed mid-run (each task id
runs at least once, and the queue drains); a task that always rejects itself reaches the
dead-letter queue after maxReceiveCount receives.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config

from tests.cmq.cluster import CmqCluster, unique_queue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ROOT = Path(__file__).parents[2]
TASKS = 40
MAX_RECEIVES = 2
KEY, SECRET = "AKIDCELERYTEST", "celery-test-secret"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CmqCluster]:
    """Three ``cmq serve`` processes of our own (this module kills one)."""
    with CmqCluster(tmp_path_factory.mktemp("celery-cluster"), n=3, groups=2).running() as c:
        yield c


def _sqs(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        config=Config(retries={"max_attempts": 10, "mode": "standard"}),
    )


def _until(
    what: str, done: Callable[[], bool], timeout: float, detail: Callable[[], str] = str
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {detail()}")
        time.sleep(0.2)


class Worker:
    """A ``celery worker`` process on ``queue`` through the node at ``url``."""

    def __init__(self, url: str, queue: str, results: Path, log: Path) -> None:
        netloc = urlsplit(url).netloc
        self.env = dict(
            os.environ,
            CMQ_CELERY_BROKER=f"sqs://{KEY}:{SECRET}@{netloc}",
            CMQ_CELERY_QUEUE=queue,
            CMQ_CELERY_RESULTS=str(results),
        )
        self.results = results
        self.log = log

    def start(self) -> subprocess.Popen[bytes]:
        args = [
            sys.executable, "-m", "celery", "-A", "tests.celery.worker_app", "worker",
            "--pool=threads", "--concurrency=4", "--loglevel=INFO",
            "--without-heartbeat", "--without-mingle", "--without-gossip",
        ]  # fmt: skip
        out = open(self.log, "ab")  # noqa: SIM115 - owned by the process
        return subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=out, stderr=out)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def ran(self, kind: str) -> dict[str, int]:
        """How many times each key of ``kind`` ran."""
        counts: dict[str, int] = {}
        for p in self.results.iterdir():
            k, key, _ = p.name.split("-", 2)
            if k == kind:
                counts[key] = counts.get(key, 0) + 1
        return counts


def _send(worker: Worker, name: str, keys: list[str]) -> None:
    """Send one task per key through kombu's SQS transport (as an application would)."""
    code = (
        "import sys\n"
        "from tests.celery.worker_app import app\n"
        f"for key in sys.argv[1:]:\n    app.send_task({name!r}, args=[key])\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, *keys], cwd=ROOT, env=worker.env, check=True, timeout=120
    )


def _queues(sqs: Any, name: str) -> tuple[str, str]:
    """The task queue (RedrivePolicy to its DLQ, short visibility) and its DLQ's URL."""
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = {"deadLetterTargetArn": arn, "maxReceiveCount": MAX_RECEIVES}
    url = sqs.create_queue(
        QueueName=name,
        Attributes={"RedrivePolicy": json.dumps(policy), "VisibilityTimeout": "3"},
    )["QueueUrl"]
    return url, dlq


def _task_ids(sqs: Any, dlq: str) -> list[tuple[str, str]]:
    """(task name, key) of each message now in ``dlq`` (received, not deleted): kombu's
    envelope, base64 JSON whose ``body`` is the task's base64 JSON ``[args, kwargs, embed]``."""
    got = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    out = []
    for m in got.get("Messages", []):
        envelope = json.loads(base64.b64decode(m["Body"]))
        args = json.loads(base64.b64decode(envelope["body"]))[0]
        out.append((envelope["headers"]["task"], args[0]))
    return out


def test_tasks_survive_a_leader_kill_and_poison_reaches_the_dlq(
    cluster: CmqCluster, tmp_path: Path
) -> None:
    name = unique_queue("celery")
    sqs_any = _sqs(cluster.http[1])
    source, dlq = _queues(sqs_any, name)
    leader = cluster.leader_node_of_queue(name)
    via = next(n for n in sorted(cluster.procs) if n != leader)  # survives the kill
    results = tmp_path / "results"
    results.mkdir()
    worker = Worker(cluster.http[via], name, results, tmp_path / "worker.log")
    proc = worker.start()
    try:
        keys = [f"t{i}" for i in range(TASKS)]
        _send(worker, "record", keys[: TASKS // 2])
        _until("a quarter of the tasks", lambda: len(worker.ran("ran")) >= TASKS // 4, 60)
        cluster.kill(leader)
        _send(worker, "record", keys[TASKS // 2 :])
        _until(
            "every task",
            lambda: set(worker.ran("ran")) == set(keys),
            90,
            lambda: f"missing {sorted(set(keys) - set(worker.ran('ran')))}; {worker.tail()}",
        )
        assert cluster.leader_node_of_queue(name) != leader
        sqs = _sqs(cluster.http[via])

        def drained() -> bool:  # every task was acked (deleted), none left in flight
            names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
            got = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=names)
            return all(v == "0" for v in got["Attributes"].values())

        _until("the task queue to drain", drained, 30)
        _send(worker, "poison", ["p1"])
        found: list[tuple[str, str]] = []

        def in_dlq() -> bool:
            found.extend(_task_ids(sqs, dlq))
            return bool(found)

        _until("the poisoned task in the DLQ", in_dlq, 60)
        assert set(found) == {("poison", "p1")}
        assert worker.ran("poison")["p1"] >= MAX_RECEIVES
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
