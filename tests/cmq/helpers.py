"""In-process queue clusters for tests: three `QueueNode`s on loopback in one event loop, with a
small snapshot interval so catch-up by snapshot is exercised (the catch-up, outcome-unknown and
send-slot tests); a one-node cluster (`one_node`); a founded catalog (`founded`); the leader
side of calls over a stand-in Raft (`leader_ops`)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from cmq.catalog.meta import CatalogMachine
from cmq.cli.launch import free_ports
from cmq.model import QueueAttributes
from cmq.node.config import NodeConfig
from cmq.node.host import MemoryFiles, NodeHost
from cmq.node.queue_node import QueueNode
from cmq.routing.ops import LeaderOps
from cmq.routing.receipts import ReceiptSigner
from cmq.routing.wakeups import Wakeups
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN
from raftlog.runtime import GroupOptions, MultiRaft
from raftlog.runtime.host import SYSTEM_CLOCK, inline
from raftlog.storage.memory import MemoryDisks
from raftlog.transport.memory import MemoryNetwork
from raftlog.transport.peer import Address
from raftlog.transport.protocol import ProtocolRange


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


async def wait_until(cond: object, timeout: float = 20.0, interval: float = 0.05) -> None:
    """Poll ``cond()`` every ``interval`` seconds until true; AssertionError after ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(interval)
    raise AssertionError("condition not reached")


@dataclass
class Twins:
    """The in-memory I/O of an in-process cluster (see the module docstring): one network and
    one set of disks for every node, files per node. They outlive the nodes' hosts, so a node
    built again on the same `host` finds its data. Build inside the running event loop."""

    ids: tuple[int, ...]
    seed: int = 0
    net: MemoryNetwork = field(init=False)
    disks: MemoryDisks = field(init=False)
    files: dict[int, MemoryFiles] = field(init=False)

    def __post_init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.net = MemoryNetwork(loop, random.Random(f"twins/{self.seed}/net"))
        self.disks = MemoryDisks(loop, random.Random(f"twins/{self.seed}/disks"))
        self.files = {nid: MemoryFiles() for nid in self.ids}

    def host(self, nid: int) -> NodeHost:
        """Node ``nid``'s host: a new transport on the shared network, the shared disks."""
        speaks = ProtocolRange(PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX)
        return NodeHost(
            transport=self.net.transport(nid, self.ids, protocols=speaks),
            disks=self.disks,
            offload=inline,
            segments=self.files[nid].segment_store,
            files=self.files[nid],
        )


@contextlib.asynccontextmanager
async def running(
    cfgs: dict[int, NodeConfig], twins: Twins | None = None
) -> AsyncIterator[dict[int, QueueNode]]:
    """The nodes of ``cfgs`` started and ready (on ``twins`` when given, else on real I/O);
    closed on exit."""
    nodes = {
        nid: QueueNode(cfg, None if twins is None else twins.host(nid)) for nid, cfg in cfgs.items()
    }
    for n in nodes.values():
        await n.start()
    try:
        await wait_until(lambda: all(n.is_ready() for n in nodes.values()))
        yield nodes
    finally:
        for n in nodes.values():
            await n.close()


async def queue_with_follower(
    nodes: dict[int, QueueNode], queue: str, attrs: QueueAttributes
) -> tuple[int, int, QueueNode]:
    """Create ``queue`` through node 1: its group, the group's leader (an id) and a node that
    does not lead it, once that node knows the queue (calls through it are forwarded)."""
    await nodes[1].create_queue(queue, attrs)
    group = nodes[1].catalog.group_of(queue)
    assert group is not None
    leader = nodes[1].raft.leader_of(group)
    follower = next(n for nid, n in nodes.items() if nid != leader)
    await wait_until(lambda: follower.catalog.group_of(queue) == group)
    return group, leader, follower


@contextlib.asynccontextmanager
async def one_node(
    root: Path, housekeeping_interval: float, **settings: Any
) -> AsyncIterator[QueueNode]:
    """A started, ready one-node cluster under ``root`` (10 ms ticks); ``settings``: more
    `NodeConfig` fields (e.g. ``segment_max_bytes``)."""
    addr = Address("127.0.0.1", free_ports(1)[0])
    settings.setdefault("tick_interval", 0.01)
    node = QueueNode(
        NodeConfig(
            node_id=1,
            peer=addr,
            peers={1: addr},
            data_dirs=(str(root),),
            secret=b"node-effects-test-secret-0123456789",
            groups=1,
            housekeeping_interval=housekeeping_interval,
            **settings,
        )
    )
    await node.start()
    try:
        await wait_until(node.is_ready, interval=0.02)
        yield node
    finally:
        await node.close()


def founded(groups: int, nodes: int = 1) -> CatalogMachine:
    """A catalog with ``nodes`` registered nodes, founded with ``groups`` data groups."""
    m = CatalogMachine()
    for n in range(1, nodes + 1):
        m.apply(n, CatalogMachine.register_node(n, f"10.0.0.{n}:9080", ["/d"]))
    assert m.apply(nodes + 1, CatalogMachine.init(groups, 3, list(range(1, nodes + 1)))) is True
    return m


def leader_ops(raft: object, secret: bytes, **options: Any) -> LeaderOps:
    """`LeaderOps` over ``raft`` (a stand-in for `MultiRaft`): an empty catalog, no machines,
    receipts signed with ``secret``, the system clock and a 1 s request timeout; ``options``
    are LeaderOps' own (``coalesce_sends``, ...)."""
    return LeaderOps(
        raft=cast(MultiRaft, raft),
        catalog=CatalogMachine(),
        machines={},
        signer=ReceiptSigner(secret),
        wakeups=Wakeups(),
        clock=SYSTEM_CLOCK,
        request_timeout=1.0,
        **options,
    )
