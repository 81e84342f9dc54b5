"""MultiRaft in one process: three nodes on loopback, real WALs with fsync, several groups."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from raftlog.core import ConfChangeKind, Role
from raftlog.errors import NotLeader, PeerUnavailable
from raftlog.runtime import GroupOptions, MultiRaft
from raftlog.runtime.applog import AppendLog
from raftlog.runtime.config import RemoteCallError
from raftlog.storage import Wal, WalOptions
from tests.raftlog.runtime.nodes import (
    GROUPS,
    change_retrying,
    closing,
    make_nodes,
    open_all,
    propose_retrying,
    single_node,
    sm,
    until,
    wait_applied,
    wait_leader,
)


async def test_groups_replicate_and_batch_concurrent_proposals(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path)
    await open_all(nodes)
    async with closing(nodes):
        for g in GROUPS:
            leader = await wait_leader(nodes, g)
            cmds = [b"g%d-%d" % (g, k) for k in range(200)]
            results = await asyncio.gather(*(nodes[leader].propose(g, c, timeout=10) for c in cmds))
            assert sorted(results) == list(range(len(cmds)))  # type: ignore[type-var]
            await wait_applied(nodes, g, len(cmds))
            seqs = [sm(nd, g).commands for nd in nodes.values()]
            assert seqs[0] == seqs[1] == seqs[2]
            assert sorted(seqs[0]) == sorted(cmds)
            counters = nodes[leader].group(g).counters
            assert counters.batches < counters.proposals  # concurrent proposals were packed
        stats = nodes[1].wals[0].stats()
        assert stats.fsyncs > 0 and stats.records_per_fsync >= 1.0


async def test_follower_refuses_proposals_with_a_hint(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path)
    await open_all(nodes)
    async with closing(nodes):
        leader = await wait_leader(nodes, 1)
        follower = next(n for n in nodes if n != leader)
        for _ in range(100):
            if nodes[follower].status(1).leader == leader:
                break
            await asyncio.sleep(0.02)
        with pytest.raises(NotLeader) as info:
            await nodes[follower].propose(1, b"x")
        assert info.value.leader_hint == leader
        # A group that is not (or no longer) open here: retriable, nothing proposed.
        with pytest.raises(NotLeader, match="group 9 is not open") as info:
            await nodes[follower].propose(9, b"x")
        assert info.value.leader_hint == 0 and not info.value.outcome_unknown


async def test_restart_recovers_from_wal_and_snapshots(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, snapshot_entries=50, keep_entries=10)
    await open_all(nodes)
    async with closing(nodes):
        for k in range(120):
            await propose_retrying(nodes, 1, b"c%d" % k)
        await wait_applied(nodes, 1, 120)
        assert all(nd.group(1).counters.snapshots >= 1 for nd in nodes.values())
        # Restart node 3 from its data directory alone.
        victim = 3
        await nodes[victim].close()
        nodes[victim] = MultiRaft(nodes[victim].cfg)  # same address, same data directory
        await nodes[victim].start()
        await nodes[victim].open_group(1, AppendLog(), voters=list(nodes))
        await propose_retrying(nodes, 1, b"after-restart")
        await wait_applied(nodes, 1, 121)
        seqs = [sm(nd, 1).commands for nd in nodes.values()]
        assert seqs[0] == seqs[1] == seqs[2]
        assert seqs[0][-1] == b"after-restart"


async def test_membership_and_transfer(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, n=4)
    founders = [1, 2, 3]
    for nid, nd in nodes.items():
        await nd.start()
        await nd.open_group(1, AppendLog(), voters=founders if nid in founders else [])
    async with closing(nodes):
        for k in range(10):
            await propose_retrying(nodes, 1, b"%d" % k)
        await change_retrying(nodes, 1, ConfChangeKind.ADD_LEARNER, 4)
        await until(lambda: len(sm(nodes[4], 1).commands) >= 10)
        assert sm(nodes[4], 1).commands[:10] == [b"%d" % k for k in range(10)]
        await change_retrying(nodes, 1, ConfChangeKind.PROMOTE, 4)
        # A transfer target must know it is a voter, or it ignores the order to campaign.
        await until(lambda: 4 in nodes[4].status(1).conf.voters)
        leader = await wait_leader(nodes, 1)
        nodes[leader].transfer_leader(1, 4)
        assert await wait_leader(nodes, 1) in (4, leader)
        assert await until(lambda: nodes[4].status(1).role is Role.LEADER)
        assert nodes[4].status(1).conf.voters == (1, 2, 3, 4)


async def test_groups_pinning_old_wal_segments_are_snapshotted(tmp_path: Path) -> None:
    node = single_node(
        tmp_path,
        wal_options=WalOptions(segment_bytes=32 << 10),
        group_options=GroupOptions(snapshot_entries=10**9, snapshot_bytes=1 << 40),
        max_wal_segments=3,
        pin_check_ticks=5,
    )
    await node.start()
    try:
        for g in (1, 2):
            await node.open_group(g, AppendLog(), voters=[1])
            await wait_leader({1: node}, g)
        for k in range(400):
            await node.propose(1 + k % 2, b"x" * 1000, timeout=10)
        for _ in range(200):
            if len(node.wals[0].segments()) <= 3:
                break
            await asyncio.sleep(0.02)
        assert len(node.wals[0].segments()) <= 3
        forced = sum(g.counters.forced_snapshots for g in node.groups.values())
        assert forced >= 1
        assert node.wals[0].stats().segments_deleted >= 1
    finally:
        await node.close()


async def test_forwarded_calls_over_the_peer_connection(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path)

    async def echo(peer: int, payload: bytes) -> bytes:
        if payload == b"fail":
            raise RemoteCallError(b"refused: fail")
        return b"%d:" % peer + payload

    for nd in nodes.values():
        await nd.start()
    nodes[1].set_call_handler(echo)
    async with closing(nodes):
        assert await nodes[2].call(1, b"hello", timeout=5) == b"2:hello"
        replies = await asyncio.gather(*(nodes[3].call(1, b"%d" % i, timeout=5) for i in range(50)))
        assert replies == [b"3:%d" % i for i in range(50)]
        with pytest.raises(RemoteCallError) as info:
            await nodes[2].call(1, b"fail", timeout=5)
        assert info.value.payload == b"refused: fail"
        with pytest.raises(RemoteCallError):
            await nodes[1].call(2, b"no handler there", timeout=5)
        await nodes[3].close()
        with pytest.raises(PeerUnavailable):
            await nodes[1].call(3, b"down", timeout=0.5)


async def test_heartbeats_of_all_groups_share_one_frame_per_peer_per_tick(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path)
    groups = range(1, 9)
    for nd in nodes.values():
        await nd.start()
        for g in groups:
            await nd.open_group(g, AppendLog(), voters=list(nodes))
    async with closing(nodes):
        for g in groups:
            await wait_leader(nodes, g)
        leads = {g: (await wait_leader(nodes, g)) for g in groups}
        busiest = max(nodes, key=lambda n: sum(1 for v in leads.values() if v == n))
        led = sum(1 for v in leads.values() if v == busiest)
        assert led >= 3  # several groups led by one node: their beats must coalesce
        peer = next(p for p in nodes if p != busiest)
        before = nodes[busiest].transport.stats()[peer].frames_sent
        await asyncio.sleep(1.0)  # idle: only heartbeats and their answers flow
        frames = nodes[busiest].transport.stats()[peer].frames_sent - before
        ticks = 1.0 / nodes[busiest].cfg.tick_interval
        # One BEATS frame (plus at most one BEAT_ACKS frame) per tick, not one per group.
        assert frames <= 2.5 * ticks, (frames, ticks, led)
        assert frames >= 0.2 * ticks  # beats do flow (a loaded machine may skip some ticks)


async def test_groups_are_snapshotted_periodically(tmp_path: Path) -> None:
    node = single_node(tmp_path, snapshot_every_ticks=10)
    await node.start()
    try:
        await node.open_group(1, AppendLog(), voters=[1])
        await wait_leader({1: node}, 1)
        await node.propose(1, b"one", timeout=5)
        for _ in range(100):
            if node.group(1).store.snapshot().meta.index >= 2:
                break
            await asyncio.sleep(0.02)
        assert node.group(1).store.snapshot().meta.index >= 2
        assert node.group(1).counters.forced_snapshots >= 1
    finally:
        await node.close()


async def test_stats_is_a_frozen_snapshot_of_every_counter(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path)
    await open_all(nodes)
    async with closing(nodes):
        leader = await wait_leader(nodes, 1)
        await asyncio.gather(*(nodes[leader].propose(1, b"c%d" % k, timeout=10) for k in range(20)))
        snap = nodes[leader].stats()
        assert snap.node == leader
        assert [g.group for g in snap.groups] == list(GROUPS)
        g1 = snap.groups[0]
        assert g1.leader == leader and g1.term == nodes[leader].status(1).term
        assert g1.proposals == 20 and 1 <= g1.batches <= 20
        assert len(snap.wals) == 1 and snap.wals[0].fsyncs > 0
        assert [p.peer for p in snap.peers] == sorted(set(nodes) - {leader})
        assert snap.sent.appends > 0 and snap.sent.append_entries >= g1.batches
        with pytest.raises(AttributeError):
            g1.proposals = 0  # type: ignore[misc]
        await nodes[leader].propose(1, b"one more", timeout=10)
        assert snap.groups[0].proposals == 20  # a copy, not a view
        assert nodes[leader].stats().groups[0].proposals == 21


async def test_a_leader_stuck_on_its_disk_fails_its_waiters_once_it_steps_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's WAL fsync hangs (its driver waits on the disk); leadership is transferred
    away. The proposal waiting on it fails at once with an unknown outcome, not when the disk
    comes back (`GroupDriver` notices the step-down on the message that causes it)."""
    nodes = make_nodes(tmp_path)
    for nd in nodes.values():
        await nd.start()
        await nd.open_group(1, AppendLog(), voters=list(nodes))
    release = threading.Event()
    try:
        await propose_retrying(nodes, 1, b"before")
        leader = await wait_leader(nodes, 1)
        stuck_dir = str(tmp_path / f"n{leader}")
        real = Wal._sync

        def hanging(self: Wal, fd: int) -> None:
            if self.directory == stuck_dir:
                release.wait(30)
            real(self, fd)

        monkeypatch.setattr(Wal, "_sync", hanging)
        waiting = asyncio.ensure_future(nodes[leader].propose(1, b"stuck", timeout=30))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # committed by the followers, but not applied: disk stuck
        target = next(n for n in nodes if n != leader)
        nodes[leader].transfer_leader(1, target)
        with pytest.raises(NotLeader) as lost:
            await asyncio.wait_for(waiting, 5)
        assert lost.value.outcome_unknown
        assert not release.is_set()  # the disk is still stuck
    finally:
        release.set()
        for nd in nodes.values():
            await nd.close()
