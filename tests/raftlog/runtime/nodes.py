"""In-memory multi-raft node builders for the runtime tests: ``n`` `MultiRaft` hosts on loopback
with real WALs (`make_nodes`, `single_node`, `open_all` over `GROUPS`, `closing` to close them
all at the end), and the waits and retries the tests drive them with (`wait_leader`,
`propose_retrying`, `change_retrying`, `until`, `wait_applied`) and `sm`, a group's `AppendLog`
on a node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from raftlog.core import ConfChangeKind, Role
from raftlog.errors import ConfChangeInProgress, LearnerNotReady, NotLeader
from raftlog.runtime import GroupOptions, MultiRaft, RuntimeConfig
from raftlog.runtime.applog import AppendLog
from raftlog.transport.peer import Address
from tests.ports import free_ports

GROUPS = (1, 2, 3)


def make_nodes(
    tmp: Path, n: int = 3, runtime: dict[str, Any] | None = None, **opts: int
) -> dict[int, MultiRaft]:
    """``n`` nodes on loopback ticking every 20 ms; ``runtime``: more `RuntimeConfig` fields,
    ``opts``: `GroupOptions` fields."""
    ports = free_ports(n)
    peers = {i + 1: Address("127.0.0.1", p) for i, p in enumerate(ports)}
    nodes = {}
    for nid, addr in peers.items():
        d = tmp / f"n{nid}"
        d.mkdir(exist_ok=True)
        nodes[nid] = MultiRaft(
            RuntimeConfig(
                node_id=nid,
                listen=addr,
                peers=peers,
                secret=b"test-secret",
                data_dirs=(str(d),),
                tick_interval=0.02,
                seed=nid,
                group_options=GroupOptions(**opts),
                **(runtime or {}),
            )
        )
    return nodes


def single_node(tmp: Path, **cfg: Any) -> MultiRaft:
    """A one-node cluster (it elects itself) ticking every 10 ms."""
    addr = Address("127.0.0.1", free_ports(1)[0])
    return MultiRaft(
        RuntimeConfig(
            node_id=1,
            listen=addr,
            peers={1: addr},
            secret=b"s",
            data_dirs=(str(tmp),),
            tick_interval=0.01,
            **cfg,
        )
    )


async def wait_leader(nodes: dict[int, MultiRaft], group: int, timeout: float = 10.0) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        leaders = [
            nid
            for nid, nd in nodes.items()
            if group in nd.groups and nd.status(group).role is Role.LEADER
        ]
        if len(leaders) == 1:
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"no leader for group {group}")


async def propose_retrying(nodes: dict[int, MultiRaft], group: int, cmd: bytes) -> object:
    for _ in range(200):
        leader = await wait_leader(nodes, group)
        try:
            return await nodes[leader].propose(group, cmd, timeout=5)
        except (TimeoutError, NotLeader):
            await asyncio.sleep(0.05)
    raise AssertionError("proposal never committed")


async def change_retrying(
    nodes: dict[int, MultiRaft], group: int, kind: ConfChangeKind, node: int, timeout: float = 20
) -> None:
    """A membership change at whoever leads, retried while it is refused for a passing reason
    (leadership moved, a change still pending, the learner not caught up yet)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        leader = await wait_leader(nodes, group)
        try:
            await nodes[leader].change_membership(group, kind, node)
            return
        except (NotLeader, ConfChangeInProgress, LearnerNotReady):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def until(check: Any, timeout: float = 15) -> bool:
    """Poll ``check()`` until it holds or ``timeout`` seconds pass; its last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check() and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return bool(check())


async def wait_applied(nodes: dict[int, MultiRaft], group: int, count: int) -> None:
    for _ in range(500):
        if all(len(sm(nd, group).commands) >= count for nd in nodes.values()):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("replicas did not catch up")


def sm(node: MultiRaft, group: int) -> AppendLog:
    machine = node.group(group).sm
    assert isinstance(machine, AppendLog)
    return machine


async def open_all(nodes: dict[int, MultiRaft]) -> None:
    for nd in nodes.values():
        await nd.start()
        for g in GROUPS:
            await nd.open_group(g, AppendLog(), voters=list(nodes))


@asynccontextmanager
async def closing(nodes: dict[int, MultiRaft]) -> AsyncIterator[None]:
    """Close every node on the way out (those ``nodes`` holds then: a restarted one too)."""
    try:
        yield
    finally:
        for nd in nodes.values():
            await nd.close()
