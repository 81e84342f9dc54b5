"""SimNetwork: ordering, loss, duplication, symmetric and one-way partitions, heal."""

from __future__ import annotations

import random

from raftlog.core import Message, MsgType
from raftlog.sim import PERFECT, NetFaults, SendOutcome, SimNetwork


def msg(frm: int, to: int, term: int = 1) -> Message:
    return Message(MsgType.HEARTBEAT, to=to, frm=frm, term=term)


def drain(net: SimNetwork) -> list[tuple[int, Message, bool]]:
    out = []
    while net.peek_time() is not None:
        env, ok = net.pop()
        out.append((env.deliver_at, env.msg, ok))
    return out


def test_delivery_is_ordered_by_time_then_send_order() -> None:
    net = SimNetwork(random.Random(1), NetFaults(min_delay=3, max_delay=3))
    for term in range(1, 6):
        assert net.send(0, 1, msg(1, 2, term)) is SendOutcome.QUEUED
    got = drain(net)
    assert [m.term for _, m, _ in got] == [1, 2, 3, 4, 5]
    assert all(at == 3 for at, _, _ in got)


def test_varying_delays_reorder_messages() -> None:
    net = SimNetwork(random.Random(7), NetFaults(min_delay=1, max_delay=20))
    for term in range(1, 30):
        net.send(0, 1, msg(1, 2, term))
    got = drain(net)
    times = [at for at, _, _ in got]
    assert times == sorted(times)
    assert [m.term for _, m, _ in got] != sorted(m.term for _, m, _ in got)


def test_loss_and_duplication() -> None:
    net = SimNetwork(random.Random(1), NetFaults(drop=1.0))
    assert net.send(0, 1, msg(1, 2)) is SendOutcome.LOST
    assert net.in_flight() == 0
    net.set_faults(NetFaults(duplicate=1.0))
    net.send(0, 1, msg(1, 2))
    assert [m for _, m, _ in drain(net)] == [msg(1, 2), msg(1, 2)]


def test_symmetric_partition_cuts_both_directions_between_sides_only() -> None:
    net = SimNetwork(random.Random(1), PERFECT)
    net.partition([1, 2], [3])
    assert net.send(0, 1, msg(1, 3)) is SendOutcome.CUT
    assert net.send(0, 1, msg(3, 2)) is SendOutcome.CUT
    assert net.send(0, 1, msg(1, 2)) is SendOutcome.QUEUED
    assert net.send(0, 1, msg(2, 1)) is SendOutcome.QUEUED
    net.heal()
    assert net.send(0, 1, msg(1, 3)) is SendOutcome.QUEUED
    assert net.cuts() == []


def test_one_way_partition() -> None:
    net = SimNetwork(random.Random(1), PERFECT)
    net.cut(1, 2)
    assert net.is_cut(1, 2) and not net.is_cut(2, 1)
    assert net.send(0, 1, msg(1, 2)) is SendOutcome.CUT
    assert net.send(0, 1, msg(2, 1)) is SendOutcome.QUEUED


def test_cut_while_in_flight_loses_the_message() -> None:
    net = SimNetwork(random.Random(1), PERFECT)
    net.send(0, 1, msg(1, 2))
    net.send(0, 1, msg(2, 1))
    net.cut(1, 2)
    got = {(m.frm, m.to): ok for _, m, ok in drain(net)}
    assert got == {(1, 2): False, (2, 1): True}


def test_same_seed_same_schedule() -> None:
    def schedule(seed: int) -> list[tuple[int, int]]:
        net = SimNetwork(random.Random(seed), NetFaults(drop=0.2, duplicate=0.2, max_delay=9))
        for term in range(50):
            net.send(term, 1, msg(1 + term % 3, 1 + (term + 1) % 3, term))
        return [(at, m.term) for at, m, _ in drain(net)]

    assert schedule(5) == schedule(5)
    assert schedule(5) != schedule(6)


def test_drop_forgets_one_replicas_traffic_in_both_directions() -> None:
    net = SimNetwork(random.Random(1))
    for frm, to, group in [(1, 2, 1), (2, 1, 1), (2, 3, 1), (1, 2, 2)]:
        net.send(0, group, Message(MsgType.HEARTBEAT, to=to, frm=frm, term=1))
    assert net.drop(1, 1) == 2  # group 1, to or from node 1
    left = []
    while net.in_flight():
        env, _ = net.pop()
        left.append((env.group, env.msg.frm, env.msg.to))
    assert sorted(left) == [(1, 2, 3), (2, 1, 2)]
    assert net.stats["reset"] == 2
