"""Power loss on real `cmq serve` processes whose data directories live on LazyFS mounts.

A power loss is SIGKILL + `LazyFS.drop_unsynced` (every write, creation, rename and removal not
fsynced is forgotten) + restart. Under a send/receive/ack load through HTTP on random nodes:
one node at a time (a follower, then the leader of the queue's group), and all three at once.
Then a drain, and the checks: every confirmed send delivered (lost = 0), nothing delivered that
was never sent (unexpected = 0), nothing delivered again after its ack was confirmed.

Snapshots are taken every few dozen entries (and the log compacted) so that recovery goes
through every path: snapshot file, segment files truncated back to the snapshot's offsets,
replay of the log suffix. `CHAOS_LONG=1` runs longer loads with more power losses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmq.client import Client
from cmq.fsm.segments import FileSegmentStore, StoredMessage, encode_record
from tests.chaos.diskcluster import (
    LONG,
    SNAPSHOTS,
    DiskCluster,
    assert_no_stopped_groups,
    create_queue,
    wait_caught_up,
    wait_ready,
)
from tests.chaos.lazyfs import LazyFS, unavailable_reason
from tests.cmq.cluster import Load, assert_safe

pytestmark = pytest.mark.slow

_REASON = unavailable_reason()
needs_fuse = pytest.mark.skipif(_REASON is not None, reason=f"LazyFS unavailable: {_REASON}")


@pytest.fixture
def lazy_cluster(tmp_path: Path) -> Iterator[DiskCluster]:
    c = DiskCluster(tmp_path, lazy=True, group_options=SNAPSHOTS)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


@needs_fuse
async def test_power_loss_of_one_node_at_a_time(lazy_cluster: DiskCluster) -> None:
    c = lazy_cluster
    await create_queue(c, "pl")
    load = Load(c, "pl", seed=2)
    await load.start()
    rounds = 6 if LONG else 2
    drops: list[dict[str, Any]] = []
    for r in range(rounds):
        await asyncio.sleep(2.5)
        leader = await asyncio.to_thread(c.leader_of, "pl")
        # Alternate: a follower, then the leader of the queue's data group.
        victim = leader if r % 2 else next(n for n in sorted(c.procs) if n != leader)
        # Every other power loss leaves torn tails (part of the unsynced appends kept).
        torn = 100 + r if r % 2 else None
        drops.append(await asyncio.to_thread(c.power_loss, victim, torn))
        await asyncio.sleep(1.0)
        c.start(victim)
        await wait_ready(c)
    await asyncio.sleep(2)
    out = await load.drain()
    print("dropped:", [(d["files_reverted"], d["bytes_dropped"]) for d in drops])
    assert_safe(out, "one node at a time")
    # The faults bit: unsynced segment appends (no fsync on apply) were taken back.
    assert any(d["bytes_dropped"] > 0 for d in drops), drops
    assert_no_stopped_groups(c)


@needs_fuse
async def test_coordinated_power_loss_of_all_nodes(lazy_cluster: DiskCluster) -> None:
    c = lazy_cluster
    await create_queue(c, "all")
    load = Load(c, "all", seed=3)
    await load.start()
    for _ in range(3 if LONG else 1):
        await asyncio.sleep(3)
        victims = await asyncio.to_thread(c.kill_all_at_once)
        drops = [c.fs[nid].drop_unsynced(torn_seed=nid) for nid in victims]
        print("dropped:", [(d["files_reverted"], d["bytes_dropped"]) for d in drops])
        await asyncio.sleep(0.5)
        for nid in victims:
            c.start(nid)
        await wait_ready(c)
    await asyncio.sleep(2)
    out = await load.drain()
    assert_safe(out, "all nodes at once")
    assert_no_stopped_groups(c)


@needs_fuse
def test_segment_directories_survive_a_power_loss(tmp_path: Path) -> None:
    """A segment store on a fresh data directory, one message appended, `flush` (what a
    snapshot does before its file is written), power loss: the segment is still there.

    Regression: the store used to create ``segments/gN`` without fsyncing the parents, so a
    power loss removed every segment file a durable snapshot referred to and the node refused
    to start ("segment missing"); after a coordinated power loss, every node did."""
    fs = LazyFS(tmp_path / "disk", tmp_path / "mnt")
    fs.start()
    try:
        store = FileSegmentStore(fs.mount / "segments" / "g1")
        msg = StoredMessage("id-1", 1, b"body", False, (), 0)
        store.append("q.1", 1, [msg], [encode_record(msg, 0)])
        store.flush()  # "every append so far durable"
        store.close()
        fs.drop_unsynced()
        seg = fs.mount / "segments" / "g1" / "q.1" / f"{1:020d}.seg"
        assert seg.exists(), sorted(str(p) for p in fs.mount.rglob("*"))
    finally:
        fs.stop()


@needs_fuse
async def test_power_loss_right_after_catching_up_by_snapshot(lazy_cluster: DiskCluster) -> None:
    """A follower that fell behind the leader's compacted log receives a snapshot with the
    segment files it refers to; a power loss right after must not leave it unable to start."""
    c = lazy_cluster
    await create_queue(c, "cu")
    leader = await asyncio.to_thread(c.leader_of, "cu")
    victim = next(n for n in sorted(c.procs) if n != leader)
    await asyncio.to_thread(c.kill, victim)
    confirmed: set[str] = set()
    async with Client(c.http[leader]) as client:
        for k in range(150):  # > 2 snapshots of 60 entries: the log the victim needs is compacted
            bodies = [f"cu-{k}-{j}" for j in range(3)]
            await client.send("cu", bodies)
            confirmed.update(bodies)
    c.start(victim)
    await asyncio.to_thread(wait_caught_up, c, victim)
    report = await asyncio.to_thread(c.power_loss, victim)
    print("dropped:", report)
    c.start(victim)
    await asyncio.to_thread(wait_caught_up, c, victim)
    assert_no_stopped_groups(c)
