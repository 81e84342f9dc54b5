"""`MemoryNetwork` / `MemoryTransport`, the in-memory twin of the peer transport: in-order
delivery, partitions that reset links (both sides told) and heal, stalls and paused nodes that
hold frames, silent crashes, unknown peers and protocol refusals, all on virtual time."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from raftlog.sim.vloop import VirtualTimeLoop
from raftlog.transport.codec import FrameKind
from raftlog.transport.memory import MemoryNetwork, MemoryTransport, NetFaults
from raftlog.transport.peer import Address
from raftlog.transport.protocol import ProtocolRange

RAFT = FrameKind.RAFT


class Node:
    def __init__(self, net: MemoryNetwork, nid: int, peers: tuple[int, ...], **kw: object) -> None:
        self.frames: list[tuple[int, bytes]] = []
        self.downs: list[int] = []
        self.t: MemoryTransport = net.transport(nid, peers, **kw)  # type: ignore[arg-type]
        self.t.bind(lambda p, k, b: self.frames.append((p, b)), self.downs.append)


@pytest.fixture
def loop() -> Iterator[VirtualTimeLoop]:
    lp = VirtualTimeLoop()
    yield lp
    lp.close()


def cluster(
    loop: VirtualTimeLoop, n: int = 2, faults: NetFaults | None = None
) -> tuple[MemoryNetwork, dict[int, Node]]:
    net = MemoryNetwork(loop, random.Random(7), faults or NetFaults(slow=0.2))
    ids = tuple(range(1, n + 1))
    nodes = {i: Node(net, i, ids) for i in ids}
    for nd in nodes.values():
        loop.run_until_complete(nd.t.start())
    loop.advance(1.0)
    return net, nodes


def test_frames_arrive_in_order_once_after_the_link_is_up(loop: VirtualTimeLoop) -> None:
    net = MemoryNetwork(loop, random.Random(1), NetFaults(slow=0.3))
    a, b = Node(net, 1, (1, 2)), Node(net, 2, (1, 2))
    loop.run_until_complete(a.t.start())
    assert not a.t.send(2, RAFT, b"early")  # b is not up yet
    loop.run_until_complete(b.t.start())
    loop.advance(1.0)
    assert a.t.is_connected(2) and b.t.is_connected(1)
    for i in range(200):
        assert a.t.send(2, RAFT, b"%d" % i)
    assert not a.t.send(9, RAFT, b"unknown peer")
    loop.advance(5.0)
    assert b.frames == [(1, b"%d" % i) for i in range(200)]
    assert a.t.stats()[2].frames_sent == 200 and b.t.stats()[1].frames_received == 200


def test_a_cut_drops_what_is_in_flight_tells_both_sides_and_heals(loop: VirtualTimeLoop) -> None:
    net, nodes = cluster(loop)
    a, b = nodes[1], nodes[2]
    a.t.send(2, RAFT, b"lost")
    net.cut(1, 2)
    loop.advance(0.01)
    assert a.downs == [2] and b.downs == [1]
    assert not a.t.send(2, RAFT, b"refused") and not a.t.is_connected(2)
    loop.advance(1.0)
    assert b.frames == []
    net.heal(1, 2)
    loop.advance(1.0)
    assert a.t.send(2, RAFT, b"after")
    loop.advance(1.0)
    assert b.frames == [(1, b"after")] and net.stats.dropped == 1


def test_a_paused_node_gets_its_frames_late_in_order_and_nobody_is_told(
    loop: VirtualTimeLoop,
) -> None:
    net, nodes = cluster(loop)
    a, b = nodes[1], nodes[2]
    net.pause(2)
    for i in range(10):
        a.t.send(2, RAFT, b"%d" % i)
    loop.advance(5.0)
    assert b.frames == [] and a.downs == b.downs == []
    net.resume(2)
    loop.advance(1.0)
    assert b.frames == [(1, b"%d" % i) for i in range(10)]
    net.stall(1, 2)
    a.t.send(2, RAFT, b"held")
    loop.advance(1.0)
    assert len(b.frames) == 10
    net.heal_all()
    loop.advance(1.0)
    assert b.frames[-1] == (1, b"held")


def test_a_silent_crash_is_seen_only_when_the_node_comes_back(loop: VirtualTimeLoop) -> None:
    net, nodes = cluster(loop)
    a, b = nodes[1], nodes[2]
    b.t.crash(notify=False)
    loop.advance(1.0)
    assert a.downs == [] and a.t.is_connected(2)
    assert a.t.send(2, RAFT, b"into the void")
    again = Node(net, 2, (1, 2))
    loop.run_until_complete(again.t.start())
    loop.advance(0.01)
    assert a.downs == [2]  # the new connection replaced the dead one
    loop.advance(1.0)
    assert a.t.send(2, RAFT, b"hello")
    loop.advance(1.0)
    assert again.frames == [(1, b"hello")] and b.frames == []


def test_a_closing_transport_resets_its_links(loop: VirtualTimeLoop) -> None:
    net, nodes = cluster(loop, 3)
    loop.run_until_complete(nodes[3].t.close())
    loop.advance(0.01)
    assert nodes[1].downs == [3] and nodes[2].downs == [3] and nodes[3].downs == []
    assert net.is_up(1, 2) and not net.is_up(1, 3)


def test_only_peers_that_know_each_other_and_share_a_protocol_connect(
    loop: VirtualTimeLoop,
) -> None:
    net = MemoryNetwork(loop, random.Random(2))
    a = Node(net, 1, (2,))
    b = Node(net, 2, ())
    c = Node(net, 3, (1,), protocols=ProtocolRange(2, 3))
    for nd in (a, b, c):
        loop.run_until_complete(nd.t.start())
    loop.advance(1.0)
    assert not net.is_up(1, 2)
    b.t.add_peer(1, Address("n1", 1))
    loop.advance(1.0)
    assert net.is_up(1, 2)
    a.t.add_peer(3, Address("n3", 1))
    loop.advance(1.0)
    assert not net.is_up(1, 3) and a.t.refused == 1  # 1 speaks only protocol 1
    a.t.remove_peer(2)
    loop.advance(0.01)
    assert not net.is_up(1, 2) and b.downs == [1]
