"""Readiness after a restart: a node is ready only once it counts towards a quorum again.

A restarted voter neither votes nor campaigns until enough peers answered its recovery ask
(`raftlog.core.recovery`). It hears its leader's heartbeats long before that, so "every group
has a known leader" alone would call it ready while a loss of the leader would find no quorum;
a rolling restart that waits for readiness would then take down the peer it still needs."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from cmq.catalog import META_GROUP
from cmq.node.queue_node import QueueNode
from tests.cmq.helpers import configs, wait_until


async def test_a_restarted_node_is_ready_only_once_it_may_vote(tmp_path: Path) -> None:
    # Slow ticks (election timeout 2 s): node 1 keeps leading alone while node 3 restarts.
    cfgs = {nid: replace(cfg, tick_interval=0.2) for nid, cfg in configs(tmp_path).items()}
    nodes = {nid: QueueNode(cfg) for nid, cfg in cfgs.items()}
    for n in nodes.values():
        await n.start()
    try:
        await wait_until(lambda: all(n.is_ready() for n in nodes.values()), 60)
        groups = sorted(nodes[1].raft.groups)
        assert groups == [META_GROUP, 1]
        for g in groups:
            leader = nodes[1].raft.leader_of(g)
            if leader != 1:
                nodes[leader].raft.transfer_leader(g, 1)
        await wait_until(lambda: all(nodes[1].raft.leader_of(g) == 1 for g in groups), 30)

        await nodes[2].close()
        await nodes[3].close()
        nodes[3] = QueueNode(cfgs[3])
        await nodes[3].start()
        # Node 3 follows node 1 again, but node 2 has not answered its recovery ask.
        await wait_until(lambda: all(nodes[3].raft.leader_of(g) == 1 for g in groups), 30)
        await asyncio.sleep(1.0)  # several asks later
        assert all(nodes[3].raft.recovering(g) for g in groups)
        assert not nodes[3].is_ready()

        nodes[2] = QueueNode(cfgs[2])
        await nodes[2].start()
        await wait_until(lambda: nodes[3].is_ready() and nodes[2].is_ready(), 30)
        assert not any(nodes[3].raft.recovering(g) for g in groups)
    finally:
        for n in nodes.values():
            await n.close()
