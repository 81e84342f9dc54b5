"""Regression test: a power loss right after a snapshot must leave a node that restarts.

Found by the chaos runner's ``power-loss`` fault (and by the LazyFS tests), fixed in 1262fc2:
the snapshot file was durable and recorded each queue's segment sizes, but the directories
holding the segment files (``<data>/segments``, ``segments/g<N>``) had been created without an
fsync of their parent, so a power loss forgot them while keeping the snapshot, and recovery
stopped with ``InvariantBroken: ...: segment missing (snapshot records N B)`` (the node could not
start until wiped and rejoined; a coordinated power loss left no node able to start).

Then the same after a plain crash (found by the chaos runner after that fix): the fix fsynced
only the parents of directories a `FileSegmentStore` *created*; a node that crashed (SIGKILL, no
power loss) before its first flush restarted with the directories present in the page cache but
not durable, took them for durable, and a later power loss after a snapshot lost ``segments/``
again. Fixed: at open the store marks its whole tree and its ancestors up to the data directory
for the first flush.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import lazyfs_unavailable, optional_module

_REASON = lazyfs_unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_REASON is not None, reason=f"LazyFS unavailable: {_REASON}"),
]


def _snapshot_index(snaps: Path, group: int) -> int:
    prefix = f"{group:020d}-"
    return max(
        (int(p.name[21:41]) for p in snaps.iterdir() if p.name.startswith(prefix)), default=0
    )


async def _wait_started(cluster: ChaosCluster) -> None:
    deadline = time.monotonic() + 30
    while not await cluster.node(1, 2).ready():
        code = cluster.procs[1].poll()
        assert code is None, f"the node exited: {cluster.last_error(1)}"
        assert time.monotonic() < deadline, "the node did not become ready"
        await asyncio.sleep(0.2)


async def _power_loss_after_snapshot(tmp_path: Path, crash_first: bool) -> None:
    mod, _ = optional_module("tests.chaos.lazyfs")
    assert mod is not None
    cluster = ChaosCluster(
        tmp_path, n=1, groups=1, group_options={"snapshot_entries": 20, "keep_entries": 10}
    )
    fs = mod.LazyFS(tmp_path / "backing", cluster.data_dir(1))
    try:
        await cluster.start(lazyfs={1: fs})
        if crash_first:
            # A plain crash before the first snapshot: the directories the node created are
            # still in the page cache only, and the restarted node finds them existing.
            cluster.kill(1)
            cluster.start_node(1)
            await _wait_started(cluster)
        node = cluster.node(1, timeout=30)
        await node.create_queue("q")
        for i in range(60):
            await node.send("q", [f"m{i}"])
        snaps = cluster.data_dir(1) / "snap"
        deadline = time.monotonic() + 30
        while _snapshot_index(snaps, 1) < 20:
            assert time.monotonic() < deadline, "no snapshot of the data group was taken"
            await asyncio.sleep(0.2)
        cluster.kill(1)
        fs.drop_unsynced()
        cluster.start_node(1)
        await _wait_started(cluster)
        got = await cluster.node(1, timeout=30).receive("q", 100)
        assert len(got) == 60  # every confirmed message survived
    finally:
        await cluster.stop()


async def test_node_restarts_after_power_loss_following_a_snapshot(tmp_path: Path) -> None:
    await _power_loss_after_snapshot(tmp_path, crash_first=False)


async def test_node_restarts_after_crash_then_power_loss_following_a_snapshot(
    tmp_path: Path,
) -> None:
    await _power_loss_after_snapshot(tmp_path, crash_first=True)
