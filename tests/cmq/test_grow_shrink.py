"""Growing and shrinking a running cluster in one process: two nodes join three, the groups move
onto them (still three voters each), a node is drained and removed, and no message is lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from cmq.catalog import META_GROUP
from cmq.errors import NodeBusy, NodeNotFound
from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.config import NodeConfig
from cmq.node.queue_node import QueueNode
from raftlog.runtime import GroupOptions
from raftlog.transport.peer import Address
from tests.cmq.helpers import wait_until
from tests.ports import free_ports

SECRET = b"grow-and-shrink-test-secret-0123"


def node_config(root: Path, nid: int, peer: Address, peers: dict[int, Address]) -> NodeConfig:
    return NodeConfig(
        node_id=nid,
        peer=peer,
        peers=peers,
        data_dirs=(str(root / f"n{nid}"),),
        secret=SECRET,
        groups=6,
        tick_interval=0.02,
        membership_interval=0.05,
        group_options=GroupOptions(snapshot_entries=50, keep_entries=5),
    )


@contextlib.asynccontextmanager
async def cluster(root: Path) -> AsyncIterator[dict[int, QueueNode]]:
    ports = free_ports(5)
    peers = {i + 1: Address("127.0.0.1", ports[i]) for i in range(3)}
    nodes = {n: QueueNode(node_config(root, n, peers[n], peers)) for n in peers}
    spare = {4: Address("127.0.0.1", ports[3]), 5: Address("127.0.0.1", ports[4])}
    for n in nodes.values():
        await n.start()
    try:
        await wait_until(lambda: all(n.is_ready() for n in nodes.values()))
        nodes.update({-n: QueueNode(node_config(root, n, a, {n: a})) for n, a in spare.items()})
        yield nodes
    finally:
        for n in nodes.values():
            with contextlib.suppress(Exception):
                await n.close()


async def join(nodes: dict[int, QueueNode], nid: int, via: int) -> None:
    """Register node ``nid`` through node ``via`` and start it with the peers it is told."""
    template = nodes.pop(-nid)
    cfg = template.cfg
    known = await nodes[via].join_node(
        nid, f"{cfg.peer.host}:{cfg.peer.port}", "", cfg.data_dirs, cfg.zone
    )
    peers = {n: Address.parse(a) for n, a in known.items()}
    nodes[nid] = QueueNode(replace(cfg, peers=peers, joined=True))
    await nodes[nid].start()


def voters_of(nodes: dict[int, QueueNode], group: int) -> set[tuple[int, ...]]:
    """Each hosting node's view of ``group``'s voters."""
    return {n.raft.status(group).conf.voters for n in nodes.values() if group in n.raft.groups}


def describe(nodes: dict[int, QueueNode]) -> str:
    """The catalog's placements and each node's view of each group (for failure messages)."""
    cat = nodes[min(n for n in nodes if n > 0)].catalog
    lines = [f"nodes {sorted(cat.nodes)}"]
    for g, p in sorted(cat.placements.items()):
        views = {
            nid: (n.raft.status(g).conf.voters, n.raft.status(g).conf.learners, n.raft.leader_of(g))
            for nid, n in nodes.items()
            if g in n.raft.groups
        }
        lines.append(f"group {g}: {p} views {views}")
    return "\n".join(lines)


def settled(nodes: dict[int, QueueNode]) -> bool:
    """No move in flight, every group has three voters on its catalog replicas, and every
    node hosts exactly the groups placed on it."""
    cat = nodes[2].catalog
    for g, p in cat.placements.items():
        if p.move is not None or len(p.replicas) != 3:
            return False
        if voters_of(nodes, g) != {p.replicas}:
            return False
    return all(
        set(n.raft.groups) - {META_GROUP} == set(cat.hosted_by(nid)) for nid, n in nodes.items()
    )


async def test_nodes_join_groups_move_and_a_drained_node_is_removed(tmp_path: Path) -> None:
    async with cluster(tmp_path) as nodes:
        entry = nodes[1]
        await entry.create_queue("grow", QueueAttributes())
        sent = []
        for k in range(30):
            sent += await entry.send("grow", [OutgoingMessage(body=b"m%d" % k)])
        await join(nodes, 4, via=2)
        await join(nodes, 5, via=3)
        cat = nodes[1].catalog
        try:
            await wait_until(lambda: settled(nodes) and cat.hosted_by(4) and cat.hosted_by(5), 60)
        except AssertionError:
            raise AssertionError(describe(nodes)) from None
        # Balanced: 6 groups x 3 replicas over 5 nodes is 3 or 4 each.
        assert all(len(cat.hosted_by(n)) in (3, 4) for n in range(1, 6)), describe(nodes)
        # Every node serves the queue, hosting its group or not.
        for n in nodes.values():
            assert (await n.get_queue("grow"))[1].visible == len(sent)
        # A node holding replicas cannot be removed; an unknown one is not found.
        with pytest.raises(NodeBusy):
            await nodes[2].remove_node(1)
        with pytest.raises(NodeNotFound):
            await nodes[2].remove_node(9)
        await nodes[2].drain_node(1)
        await wait_until(lambda: settled(nodes) and not nodes[2].catalog.hosted_by(1), 60)
        await wait_until(lambda: 1 not in nodes[2].raft.status(META_GROUP).conf.voters, 30)
        await wait_until(lambda: set(nodes[1].raft.groups) == {META_GROUP}, 30)
        await nodes[2].remove_node(1)
        assert 1 not in nodes[2].catalog.nodes
        # Still running, the removed node does not register itself again.
        await asyncio.sleep(20 * nodes[1].cfg.membership_interval)
        assert 1 not in nodes[2].catalog.nodes
        got = []
        while len(got) < len(sent):
            batch = await nodes[4].receive("grow", 10, 60, 1)
            assert batch, "messages lost"
            got += batch
            await nodes[5].ack("grow", [m.receipt for m in batch])
        assert sorted(m.id for m in got) == sorted(m.id for m in sent)

        # Restarts after the moves: every node snapshots each group it hosts (so its own latest
        # snapshot lies past the membership changes), then comes back from its files with each
        # group's voters as they are now and is ready, so able to vote, again (it used to come
        # back with the voters of before the moves and wait for a removed node's answer).
        members = sorted(n for n in nodes if n > 1)
        for nid in members:
            await snapshot_all(nodes[nid])
        for nid in members:
            await nodes[nid].close()
            nodes[nid] = QueueNode(nodes[nid].cfg)
            await nodes[nid].start()
            try:
                await wait_until(lambda: settled(nodes) and nodes[nid].is_ready(), 30)  # noqa: B023
            except AssertionError:
                raise AssertionError(f"node {nid} after its restart: {describe(nodes)}") from None


async def snapshot_all(node: QueueNode) -> None:
    """Snapshot every group of ``node`` at its applied index now."""
    marks = {}
    for g in node.raft.groups:
        driver = node.raft.group(g)
        marks[g] = driver.raw.raft.log.applied
        driver.request_snapshot()
    await wait_until(
        lambda: all(node.raft.group(g).store.snapshot().meta.index >= i for g, i in marks.items()),
        30,
    )
