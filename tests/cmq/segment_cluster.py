"""The real 3-node cluster the segment tests share: in-process `QueueNode`s on loopback (real
Raft, real segment files and fsync) configured with small segments and frequent snapshots
(`small_segments`, `SEGMENT` bytes by default), started and closed by `cluster`, and
`leader_of`, the node leading data group 1."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from cmq.node.config import NodeConfig
from cmq.node.queue_node import QueueNode
from raftlog.runtime import GroupOptions
from tests.cmq.helpers import configs, wait_until

SEGMENT = 256 << 10


def small_segments(root: Path, segment: int = SEGMENT) -> dict[int, NodeConfig]:
    return {
        nid: replace(
            cfg,
            segment_max_bytes=segment,
            housekeeping_interval=0.1,
            group_options=GroupOptions(snapshot_entries=20, keep_entries=5),
        )
        for nid, cfg in configs(root).items()
    }


@contextlib.asynccontextmanager
async def cluster(cfgs: dict[int, NodeConfig]) -> AsyncIterator[dict[int, QueueNode]]:
    """The nodes started and ready; those still in the dict are closed on exit."""
    nodes = {nid: QueueNode(cfg) for nid, cfg in cfgs.items()}
    started: list[QueueNode] = []
    try:
        for n in nodes.values():
            await n.start()
            started.append(n)
        await wait_until(lambda: all(n.is_ready() for n in nodes.values()))
        yield nodes
    finally:
        for n in nodes.values():
            if n in started:
                await n.close()


def leader_of(nodes: dict[int, QueueNode]) -> QueueNode:
    ids = {n.raft.leader_of(1) for n in nodes.values()}
    ids.discard(0)
    assert len(ids) == 1, ids
    return nodes[ids.pop()]
