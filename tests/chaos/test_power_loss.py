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
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmq.client import NO_RETRY, Client, SyncClient
from cmq.errors import CmqError
from cmq.fsm.segments import FileSegmentStore, StoredMessage, encode_record
from tests.chaos.lazyfs import LazyFS, unavailable_reason
from tests.cmq.cluster import CmqCluster, Load, assert_safe

pytestmark = pytest.mark.slow

pytestmark = pytest.mark.slow

LONG = os.environ.get("CHAOS_LONG") == "1"

# `cmq serve` with the data groups' snapshot options overridden (the CLI has no flags for them).
_LAUNCHER = """
import json, sys
import cmq.node
from raftlog.runtime import GroupOptions
options = GroupOptions(**json.loads(sys.argv[1]))
config = cmq.node.NodeConfig
cmq.node.NodeConfig = lambda *a, **kw: config(*a, **kw, group_options=options)
from cmq.cli import main
sys.exit(main(sys.argv[2:]))
"""


class DiskCluster(CmqCluster):
    """A `CmqCluster` whose nodes may have their data directory on a LazyFS mount and may run
    with other snapshot options. ``data_dir(n)`` is what the node sees; ``disk_dir(n)`` is
    where the bytes are (the LazyFS backing directory, or the data directory itself)."""

    def __init__(
        self,
        root: Path,
        *,
        lazy: bool,
        groups: int = 1,
        group_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(root, n=3, groups=groups)
        if group_options:
            for nid, args in self.args.items():
                assert args[1:3] == ["-m", "cmq"], args
                self.args[nid] = [sys.executable, "-c", _LAUNCHER, json.dumps(group_options)]
                self.args[nid] += args[3:]
        self.fs: dict[int, LazyFS] = {}
        if lazy:
            for nid in self.args:
                fs = LazyFS(root / f"node{nid}.disk", self.data_dir(nid))
                fs.start()
                self.fs[nid] = fs

    def data_dir(self, nid: int) -> Path:
        return self.root / f"node{nid}"

    def disk_dir(self, nid: int) -> Path:
        return self.fs[nid].backing if nid in self.fs else self.data_dir(nid)

    def log(self, nid: int) -> str:
        return (self.root / f"node{nid}.log").read_text(errors="replace")

    def kill_all_at_once(self) -> list[int]:
        """SIGKILL every node before waiting for any (a coordinated power loss)."""
        victims = sorted(self.procs)
        for nid in victims:
            self.procs[nid].send_signal(signal.SIGKILL)
        for nid in victims:
            self.procs.pop(nid).wait()
        return victims

    def power_loss(self, nid: int, torn_seed: int | None = None) -> dict[str, Any]:
        """SIGKILL node ``nid`` and drop what its disk had not made durable (with
        ``torn_seed``: keeping a random prefix of each file's unsynced appends)."""
        self.kill(nid)
        return self.fs[nid].drop_unsynced(torn_seed)

    def leader_of(self, queue: str, timeout: float = 15) -> int:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.leader_node_of_queue(queue)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        self.stop_all()
        for fs in self.fs.values():
            fs.stop()


def assert_no_stopped_groups(c: DiskCluster) -> None:
    for nid in c.args:
        log = c.log(nid)
        for bad in ("stopped:", "InvariantBroken", "CorruptRecord", "commit beyond"):
            assert bad not in log, f"node {nid}: {bad!r} in its log:\n{log[-3000:]}"


_REASON = unavailable_reason()
needs_fuse = pytest.mark.skipif(_REASON is not None, reason=f"LazyFS unavailable: {_REASON}")

# Small snapshot intervals: several snapshots and compactions during the run.
SNAPSHOTS = {"snapshot_entries": 60, "keep_entries": 20}


@pytest.fixture
def lazy_cluster(tmp_path: Path) -> Iterator[DiskCluster]:
    c = DiskCluster(tmp_path, lazy=True, group_options=SNAPSHOTS)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


async def create_queue(c: CmqCluster, name: str) -> None:
    async with Client(c.http[1]) as client:
        await client.create_queue(name, {"visibility_timeout": 3})


def caught_up(c: CmqCluster, nid: int, group: int = 1) -> bool:
    """Node ``nid`` follows a leader of ``group`` and has applied what that leader committed."""
    with SyncClient(c.http[nid], timeout=10, retry=NO_RETRY) as client:
        try:
            st = client.status()
        except CmqError:
            return False
        g = st["groups"].get(str(group), {})
        leader = g.get("leader")
        if not leader or leader not in c.procs:
            return False
        if leader == nid:  # it may win an election after its restart: caught up with itself
            return bool(g.get("applied", -1) >= g.get("commit", 0) > 0)
    with SyncClient(c.http[leader], timeout=10, retry=NO_RETRY) as client:
        try:
            lst = client.status()
        except CmqError:
            return False
    return bool(g.get("applied", -1) >= lst["groups"][str(group)]["commit"])


def wait_caught_up(c: CmqCluster, nid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not caught_up(c, nid):
        if nid in c.procs and c.procs[nid].poll() is not None:
            raise AssertionError(f"node {nid} exited; see {c.root}")
        assert time.monotonic() < deadline, f"node {nid} did not catch up; see {c.root}"
        time.sleep(0.2)


async def wait_ready(c: DiskCluster) -> None:
    await asyncio.to_thread(c.wait_ready, 60)


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
