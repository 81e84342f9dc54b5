"""A released segment corrupted on one replica of a real 3-node cluster (``cmq serve``
processes on loopback; no Spark): the archive reader refuses that replica's stream (the node
finds a record failing its checksum and answers ``corrupt_segment`` or cuts the stream before
the trailer) and reads the segment from another replica, byte-identical; with the segment
corrupted on every replica it is unreadable, and nothing is handed on as good."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmq.archive.errors import ReplicaFailed, SegmentUnreadable
from cmq.archive.records import SegmentTask, read_replica, read_segment
from cmq.client import Client, Message
from tests.cmq.cluster import CmqCluster, request, unique_queue

pytestmark = pytest.mark.slow

MESSAGES = 60


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[CmqCluster]:
    (tmp_path / "cluster").mkdir()
    c = CmqCluster(tmp_path / "cluster", n=3, groups=1)
    c.configure(segment_max_bytes=2048, segment_max_age=1)
    try:
        c.start_all()
        c.wait_ready(60)
        yield c
    finally:
        c.stop_all()


def flip_byte(path: Path) -> None:
    """Flip one byte in the middle of a segment file (inside a record's body)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_segment_corrupted_on_one_replica_is_read_from_another(
    cluster: CmqCluster, tmp_path: Path
) -> None:
    queue = unique_queue("corrupt")
    bodies = {f"body-{k:03d}-" + "x" * 40 for k in range(MESSAGES)}

    async def load() -> None:
        async with Client(cluster.urls, timeout=30) as client:
            await client.create_queue(queue, {"archive": True})
            for chunk in range(0, MESSAGES, 20):
                batch = sorted(bodies)[chunk : chunk + 20]
                await client.send(queue, [Message(body) for body in batch])
            acked = 0
            while acked < MESSAGES:
                got = await client.receive(queue, 10, wait_seconds=1)
                await client.ack(queue, [m.receipt for m in got])
                acked += len(got)

    asyncio.run(load())
    url = cluster.urls[0]
    deadline = time.monotonic() + 30
    released: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        status, listing = request(url, "GET", f"/v1/queues/{queue}/segments?state=released")
        assert status == 200, listing
        released = listing["segments"]
        if released:
            break
        time.sleep(0.3)
    assert released, "no segment was released"
    seg = released[0]
    first = int(str(seg["first_seq"]))
    pattern = f"node*/segments/*/{queue}.*/{first:020d}.seg"
    files = {
        p.relative_to(tmp_path / "cluster").parts[0]: p for p in tmp_path.glob(f"cluster/{pattern}")
    }
    assert len(files) == 3, files
    by_node = {f"node{nid}": cluster.http[nid] for nid in cluster.http}
    bad, *good = sorted(files)
    task = SegmentTask(
        queue,
        first,
        int(str(seg["last_seq"])),
        int(str(seg["count"])),
        str(seg["checksum"]),
        (by_node[bad], *(by_node[n] for n in good)),
    )
    clean = read_replica(by_node[bad], task, 30)  # every replica agrees before the damage
    flip_byte(files[bad])

    with pytest.raises(ReplicaFailed):
        read_replica(by_node[bad], task, 30)
    verified = read_segment(task, timeout=30)
    assert verified.replica == by_node[good[0]]
    assert verified.rows == task.count == clean.rows
    assert verified.stream_crc == clean.stream_crc
    assert verified.table.equals(clean.table) and clean.binary

    for node in good:
        flip_byte(files[node])
    with pytest.raises(SegmentUnreadable) as unreadable:
        read_segment(task, timeout=30)
    assert all(by_node[n] in str(unreadable.value) for n in files), unreadable.value
