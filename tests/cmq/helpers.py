"""In-process queue clusters for tests: three `QueueNode`s on loopback in one event loop, with a
small snapshot interval so catch-up by snapshot is exercised. Used by the catch-up,
outcome-unknown and send-slot tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

from cmq.node.queue_node import NodeConfig, QueueNode
from raftlog.runtime import GroupOptions
from raftlog.transport.peer import Address
from tests.ports import free_ports


def configs(root: Path) -> dict[int, NodeConfig]:
    """Three nodes' configurations (one data group, 20 ms ticks, snapshot every 20 entries)
    with data under ``root``."""
    ports = free_ports(3)
    peers = {i + 1: Address("127.0.0.1", p) for i, p in enumerate(ports)}
    return {
        nid: NodeConfig(
            node_id=nid,
            peer=peers[nid],
            peers=peers,
            data_dirs=(str(root / f"n{nid}"),),
            secret=b"catch-up-test-secret-0123456789",
            groups=1,
            tick_interval=0.02,
            group_options=GroupOptions(snapshot_entries=20, keep_entries=5),
        )
        for nid in peers
    }


async def wait_until(cond: object, timeout: float = 20.0) -> None:
    """Poll ``cond()`` every 50 ms until true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


@contextlib.asynccontextmanager
async def running(cfgs: dict[int, NodeConfig]) -> AsyncIterator[dict[int, QueueNode]]:
    """The nodes of ``cfgs`` started and ready; closed on exit."""
    nodes = {nid: QueueNode(cfg) for nid, cfg in cfgs.items()}
    for n in nodes.values():
        await n.start()
    try:
        await wait_until(lambda: all(n.is_ready() for n in nodes.values()))
        yield nodes
    finally:
        for n in nodes.values():
            await n.close()
