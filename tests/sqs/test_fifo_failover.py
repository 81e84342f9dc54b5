"""A FIFO queue across a leader kill (boto3, JSON protocol, a 3-node cluster of its own):
per-group order of first deliveries holds, and a deduplication id resent after the failover
is not enqueued twice (order and dedup are decided by the replicated state machine)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.cmq.cluster import CmqCluster
from tests.sqs.helpers import client

T = TypeVar("T")
GROUPS = ("a", "b", "c")
PER_ROUND = 30


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[CmqCluster]:
    with CmqCluster(tmp_path, n=3, groups=1).running() as c:
        yield c


def retry(call: Callable[[], T], limit: float = 30) -> T:
    """``call`` until it succeeds (a failover makes calls fail for a while)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            return call()
        except (ClientError, BotoCoreError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def send_round(sqs: Any, url: str, start: int) -> dict[str, str]:
    """Messages start..start+PER_ROUND-1 (group by index), each with its own dedup id, in
    batches of 10; returns dedup id -> message id."""
    ids: dict[str, str] = {}
    for first in range(start, start + PER_ROUND, 10):
        entries = [
            {
                "Id": f"e{i}",
                "MessageBody": f"m{i}",
                "MessageGroupId": GROUPS[i % len(GROUPS)],
                "MessageDeduplicationId": f"m{i}",
            }
            for i in range(first, first + 10)
        ]
        got = retry(lambda e=entries: sqs.send_message_batch(QueueUrl=url, Entries=e))
        assert not got.get("Failed"), got
        for entry in got["Successful"]:
            ids[f"m{entry['Id'][1:]}"] = entry["MessageId"]
    return ids


def consume(sqs: Any, url: str, first: dict[str, list[int]], want: int, limit: float) -> None:
    """Receive and delete until ``want`` distinct messages were seen; records first
    deliveries per group (a redelivery after an unacked lease is not a first delivery)."""
    seen = {i for seqs in first.values() for i in seqs}
    deadline = time.monotonic() + limit
    while len(seen) < want and time.monotonic() < deadline:
        got = retry(
            lambda: sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=2,
                WaitTimeSeconds=1,
                MessageSystemAttributeNames=["MessageGroupId"],
            )
        )
        for m in got.get("Messages", []):
            i = int(m["Body"][1:])
            if i not in seen:
                seen.add(i)
                first.setdefault(m["Attributes"]["MessageGroupId"], []).append(i)
            # A failed delete: the message comes back after its visibility timeout.
            with contextlib.suppress(ClientError, BotoCoreError):
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert len(seen) == want, f"saw {len(seen)} of {want} messages"


def test_order_and_dedup_survive_a_leader_kill(cluster: CmqCluster) -> None:
    name = "failover.fifo"
    clients = {nid: client(url, "json") for nid, url in enumerate(cluster.urls, start=1)}
    sqs = clients[1]
    url = retry(lambda: sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"}))[
        "QueueUrl"
    ]
    before = send_round(sqs, url, 0)
    first: dict[str, list[int]] = {}
    consume(sqs, url, first, 10, 20)  # part of the stream, then the kill mid-stream

    leader = cluster.leader_node_of_queue(name)
    cluster.kill(leader)
    survivor = clients[next(n for n in clients if n != leader)]

    # The same dedup ids again, after the failover: the originals' ids, nothing stored twice.
    again = send_round(survivor, url, 0)
    assert again == before
    send_round(survivor, url, PER_ROUND)
    consume(survivor, url, first, 2 * PER_ROUND, 60)
    for group, order in first.items():
        assert order == sorted(order), f"group {group}: first deliveries out of order {order}"
    left = retry(lambda: survivor.receive_message(QueueUrl=url, WaitTimeSeconds=3))
    assert "Messages" not in left, "a deduplicated resend was enqueued twice"
    for c in clients.values():
        c.close()
