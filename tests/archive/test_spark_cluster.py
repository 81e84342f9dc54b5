"""The archive on a Spark standalone cluster: a master and two workers started from the pyspark
installation's own ``spark-class`` on loopback (`tests.archive.standalone`), against a real
3-node cmq cluster that serves signed requests only, with a queue of ``archive=true`` and small
segments. ``cmq archive`` is given the cluster secret (``CMQ_SECRET``, as the chart's CronJob
is) and ``spark-submit`` an access key: the executors sign with the key the driver hands them.

1. Messages are sent and acked; once their segments are released, ``cmq archive --master
   spark://... --segments-per-task 1`` runs (the driver in the command, the executors on the
   workers), and a worker (its executor and Python workers with it) is SIGKILLed while its
   executor runs a task of the batch and at least four tasks are left (as the driver's REST
   API counts them): the lost task is re-run on the other executor and the batch commits.
2. A new worker joins; more messages are sent and acked; the job is submitted through
   ``spark-submit`` with the entry file docs/archive.md names (``cmq/archive/__main__.py``).
3. A third run (``cmq archive --master``) archives nothing.

Then the Parquet, read back with pyarrow, holds every message exactly once, byte-identical,
under the batch whose manifest names its segment, the manifests' counts match, and no replica
keeps a file of an archived segment.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cmq.catalog.keys import cluster_credential
from cmq.client import Client, Message
from tests.archive.conftest import NEEDS_JAVA
from tests.archive.output import check_exactly_once, manifests
from tests.archive.standalone import Standalone, spark_env, spark_home
from tests.cmq.cluster import SECRET, CmqCluster, request, unique_queue

pytestmark = [pytest.mark.slow, NEEDS_JAVA]

PER_RUN = 2_000  # messages archived by each of the two runs that write
SEGMENT_BYTES = 65_536  # about 200 messages a segment: ~10 segments (Spark tasks) a run
SEGMENT_AGE_S = 2
ENTRY = Path(__file__).resolve().parents[2] / "cmq" / "archive" / "__main__.py"
KEY = cluster_credential(SECRET.encode())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[CmqCluster]:
    (tmp_path / "cluster").mkdir()
    c = CmqCluster(tmp_path / "cluster", n=3, groups=1, anonymous=False)
    c.configure(segment_max_bytes=SEGMENT_BYTES, segment_max_age=SEGMENT_AGE_S)
    try:
        c.start_all()
        yield c
    finally:
        c.stop_all()


@pytest.fixture(autouse=True)
def signed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own clients sign with the cluster secret's credential (from the
    environment, as `cmq.client.signing` reads it)."""
    monkeypatch.setenv("CMQ_ACCESS_KEY_ID", KEY[0])
    monkeypatch.setenv("CMQ_SECRET_ACCESS_KEY", KEY[1])


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[Standalone]:
    sc = Standalone(tmp_path / "spark", workers=2, cores=1, memory="1g")
    try:
        sc.start()
        yield sc
    finally:
        sc.stop()


async def load(urls: list[str], queue: str, tag: str) -> list[dict[str, Any]]:
    """Send ``PER_RUN`` messages (bodies unique, with random bytes as hex) and ack them all;
    returns what the archive must hold for each (`check_exactly_once`'s ``expected``)."""
    import base64

    sent: dict[str, Any] = {}
    async with Client(urls, timeout=30) as client:
        sem = asyncio.Semaphore(8)

        async def send(lo: int) -> None:
            bodies = [f"{tag}-{k}-{secrets.token_hex(100)}" for k in range(lo, lo + 100)]
            msgs = [Message(b, attributes={"k": b[:16]}) for b in bodies]
            async with sem:
                got = await client.send(queue, msgs)
            for b, s in zip(bodies, got, strict=True):
                sent[b] = s

        await asyncio.gather(*(send(lo) for lo in range(0, PER_RUN, 100)))
        acked: dict[str, Any] = {}
        deadline = time.monotonic() + 120
        while len(acked) < PER_RUN:
            assert time.monotonic() < deadline, f"acked {len(acked)} of {PER_RUN}"
            msgs = await client.receive(queue, 100, wait_seconds=1, visibility_timeout=60)
            if msgs:
                res = await client.ack(queue, [m.receipt for m in msgs])
                assert all(r.ok for r in res), res
                for m in msgs:
                    acked[str(m.body)] = m
    return [
        {
            "queue": queue,
            # As received; a copy forward of its segment between the receive and the ack
            # archives it under the copy's (later) seq.
            "seq": acked[b].seq,
            "seq_at_least": True,
            "id": sent[b].id,
            "body_b64": base64.b64encode(b.encode()).decode(),
            "outcome": "acked",
            "receive_count": acked[b].receive_count,
            "attributes": {"k": b[:16]},
            "sent_at_ms": acked[b].sent_at_ms,
        }
        for b in sent
    ]


def wait_released(url: str, queue: str, n: int) -> list[dict[str, Any]]:
    """Until the queue's released segments hold ``n`` records; returns the released ones."""
    deadline = time.monotonic() + 60
    while True:
        status, listing = request(url, "GET", f"/v1/queues/{queue}/segments?state=released", None)
        assert status == 200, listing
        segs: list[dict[str, Any]] = listing["segments"]
        if sum(s["count"] for s in segs) >= n:
            assert sum(s["count"] for s in segs) == n, segs
            return segs
        assert time.monotonic() < deadline, f"released {sum(s['count'] for s in segs)} of {n}"
        time.sleep(0.5)


@dataclass
class Run:
    """A driver process (``cmq archive`` or ``spark-submit``) with its stdout and stderr
    collected by a thread each (stderr line by line as it comes, for `saw`)."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    out: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    pumps: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream, into in ((self.proc.stderr, self.lines), (self.proc.stdout, self.out)):
            t = threading.Thread(target=into.extend, args=(stream,), daemon=True)
            t.start()
            self.pumps.append(t)

    def saw(self, text: str) -> bool:
        return any(text in ln for ln in list(self.lines))

    def finish(self, timeout: float = 600) -> dict[str, Any]:
        """Wait for the exit and for both streams' ends (never reading a stream from two
        threads: each line is the pump's); returns the JSON summary, its last stdout line."""
        self.proc.wait(timeout=timeout)
        for t in self.pumps:
            t.join(timeout=30)
        out, err = "".join(self.out), "".join(self.lines)
        assert self.proc.returncode == 0, out + err[-6000:]
        summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return summary


def start(argv: list[str], root: Path, *, secret: bool) -> Run:
    """``argv`` with the Spark environment and either the cluster secret alone (``secret``: as
    the chart's CronJob runs ``cmq archive``) or the access key alone."""
    env = spark_env(root)
    if secret:
        env["CMQ_SECRET"] = SECRET
    else:
        env |= {"CMQ_ACCESS_KEY_ID": KEY[0], "CMQ_SECRET_ACCESS_KEY": KEY[1]}
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Run(proc)


def rate(what: str, s: dict[str, Any]) -> str:
    work = s["seconds"] - s["spark_seconds"]
    return (
        f"{what}: {s['rows']} rows, {s['segments']} segments, "
        f"{s['source_bytes'] / 1e6:.2f} MB of segments in {s['seconds']:.1f} s "
        f"({s['spark_seconds']:.1f} s starting Spark): {s['rows'] / work:,.0f} rows/s, "
        f"{s['source_bytes'] / 1e6 / work:.2f} MB/s of work"
    )


def test_archive_on_a_standalone_cluster_with_a_worker_killed(
    cluster: CmqCluster, spark_cluster: Standalone, tmp_path: Path
) -> None:
    queue = unique_queue("spark-cluster")
    urls = cluster.urls

    async def create() -> None:
        async with Client(urls, timeout=30) as client:
            await client.create_queue(queue, {"archive": True, "message_retention_seconds": 3600})

    asyncio.run(create())
    out = tmp_path / "archive"
    args = ["--url", ",".join(urls), "--out", str(out), "--queue", queue, "--json"]
    spark_root = spark_cluster.root
    expected = asyncio.run(load(urls, queue, "a"))
    first_segments = wait_released(urls[0], queue, PER_RUN)

    # 1. cmq archive --master spark://...; a worker dies while it runs the batch's tasks.
    archive = [sys.executable, "-m", "cmq", "archive", "--master", spark_cluster.url, *args]
    # One segment a task: ~10 tasks over the two executors, so the kill lands on a running
    # task while others are still to run (the driver is alive to see the executor go).
    run = start([*archive, "--segments-per-task", "1"], spark_root, secret=True)
    deadline = time.monotonic() + 300
    while not run.saw("writing "):
        assert run.proc.poll() is None and time.monotonic() < deadline, "".join(run.lines)
        time.sleep(0.1)
    victim = None
    while victim is None:
        assert run.proc.poll() is None and time.monotonic() < deadline, "".join(run.lines)
        busy = {e for e, n in spark_cluster.running_tasks().items() if n > 0}
        if spark_cluster.tasks_left() < 4:
            busy = set()  # too close to the stage's end: the kill could miss every task
        victim = next((i for i in (1, 2) if spark_cluster.executors(i) & busy), None)
        if victim is None:
            time.sleep(0.05)
    assert not run.saw("marking "), "the batch committed before the kill"
    step = [ln.strip() for ln in run.lines if ln.startswith("[ ") and " s] " in ln][-1]
    spark_cluster.kill_worker(victim)  # its executor was running a task of the batch
    killed_at = time.monotonic() - run.started
    first = run.finish()
    driver_log = "".join(run.lines)
    # The driver saw the executor go (its running task is re-run on the other executor).
    lost = [ln.strip() for ln in run.lines if "Lost executor" in ln or "Lost task" in ln]
    assert lost, driver_log[-6000:]
    assert first["segments"] == len(first_segments) and first["rows"] == PER_RUN, first
    print(f"\nworker {victim} killed {killed_at:.1f} s into the run, during: {step}")
    print("\n".join(lost))
    print(rate("--master spark:// (a worker killed)", first))

    # 2. spark-submit, with a new worker in place of the dead one.
    spark_cluster.start_worker(3)
    spark_cluster.wait_workers(2)
    expected += asyncio.run(load(urls, queue, "b"))
    second_segments = wait_released(urls[0], queue, PER_RUN)
    submit = [str(spark_home() / "bin" / "spark-submit"), "--master", spark_cluster.url]
    submit += ["--executor-memory", "512m", "--conf", "spark.ui.enabled=false"]
    second = start([*submit, str(ENTRY), *args], spark_root, secret=False).finish()
    assert second["segments"] == len(second_segments) and second["rows"] == PER_RUN, second
    print(rate("spark-submit", second))

    # 3. Nothing is left to archive (and no Spark is started for that).
    third = start(archive, spark_root, secret=True).finish()
    assert (third["segments"], third["rows"], third["recovered"]) == (0, 0, 0), third

    # Every message exactly once, byte-identical, in its batch, with what the cluster stored.
    got_rows = check_exactly_once(out, expected)
    assert len(got_rows) == 2 * PER_RUN
    assert {m["batch_id"] for m in manifests(out)} == {first["batch_id"], second["batch_id"]}
    released = [s["first_seq"] for s in first_segments + second_segments]
    deadline = time.monotonic() + 60
    while (left := _segment_files(tmp_path / "cluster", queue, released)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert not left, left


def _segment_files(root: Path, queue: str, firsts: list[int]) -> list[Path]:
    return [p for f in firsts for p in root.glob(f"node*/segments/*/{queue}.*/{f:020d}.seg")]
