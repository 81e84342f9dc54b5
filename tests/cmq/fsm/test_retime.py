"""A queue whose time got ahead of the leaders' clocks (one stamp from a clock two hours ahead):
without `Retime` its deadlines wait for real time to catch up; with it the queue's time runs on
from where it is and slews back, never backwards. Also the image's version 3 (the skew) and the
leader's restamping of sends."""

from __future__ import annotations

import pytest

from cmq.errors import InvalidParameter, InvariantBroken
from cmq.fsm import Lease, Leased, Produce, QueueMachine, encode_command
from cmq.fsm.commands import Retime, Retimed, decode_command, restamp_produce
from cmq.fsm.image import decode_image
from cmq.fsm.queuetime import SLEW_DIVISOR

from .test_machine import T0, Env, msg

HOUR = 3_600_000
VIS = 2_000


def _frozen(env: Env) -> None:
    """Messages leased by a lease stamped two hours ahead (a bad clock's single stamp)."""
    env.produce(5)
    assert len(env.lease(5, now=T0 + 2 * HOUR, vis=VIS).messages) == 5


def test_one_stamp_far_ahead_freezes_deliveries_without_retime() -> None:
    env = Env()
    _frozen(env)
    # The leaders' clocks are right: a minute of real time later, nothing has come back.
    for t in range(1_000, 60_000, 1_000):
        assert env.lease(5, now=T0 + t).messages == ()
    stats = env.m.stats("q", T0 + 60_000)
    assert stats is not None and stats.in_flight == 5 and stats.visible == 0


def test_retime_lets_the_leases_expire_after_their_visibility() -> None:
    env = Env()
    _frozen(env)
    now = T0 + 1_000
    assert env.m.time_ahead("q", now) == 2 * HOUR - 1_000
    res = env.run(Retime("q", now))
    assert res == Retimed(2 * HOUR - 1_000)
    assert env.m.time_ahead("q", now) == 0  # nothing more to retime
    assert env.lease(5, now=now + VIS - 500).messages == ()  # still leased: visibility holds
    # The lease lasts its visibility, stretched by the slew at most.
    back = env.lease(5, now=now + VIS * SLEW_DIVISOR // (SLEW_DIVISOR - 1) + 10)
    assert len(back.messages) == 5


def test_retime_never_moves_the_time_back_and_the_lead_slews_off() -> None:
    env = Env()
    _frozen(env)
    q = env.m._queues["q"]
    now = T0 + 1_000
    env.run(Retime("q", now))
    lead = q.skew
    last = q.clock
    t = now
    step = 997  # not a multiple of the divisor: the integer accounting must not lose time
    while q.skew:
        t += step
        env.lease(1, now=t, vis=VIS)
        assert q.clock >= last  # monotonic
        advanced = q.clock - last
        assert step * (SLEW_DIVISOR - 1) // SLEW_DIVISOR - 1 <= advanced <= step
        last = q.clock
    # Gone after about SLEW_DIVISOR times the lead, and the time is the leader's again.
    assert abs((t - now) - lead * SLEW_DIVISOR) <= 2 * step
    assert q.clock == max(last, t)
    env.lease(1, now=t + 5_000)
    assert q.clock == t + 5_000


def test_retime_of_a_queue_that_is_not_ahead_changes_nothing() -> None:
    env = Env()
    env.produce(2, now=T0 + 10)
    before = env.m.encode_image(reuse=False)
    assert env.run(Retime("q", T0 + 5_000)) == Retimed(0)
    assert env.m._queues["q"].skew == 0
    assert env.m.time_ahead("q", T0 + 5_000) == 0
    after = env.m.encode_image(reuse=False)
    assert after[4] == before[4] == 2  # written as version 2 while no queue has a skew
    assert env.run(Retime("nope", T0)).code == "QueueNotFound"  # type: ignore[union-attr]


def test_the_skew_survives_a_snapshot_and_version_2_images_still_load() -> None:
    env = Env()
    env.produce(3)
    v2 = env.m.snapshot()
    assert v2[4] == 2
    _frozen(env)
    env.run(Retime("q", T0 + 1_000))
    image = env.m.snapshot()
    assert image[4] == 3
    _, queues = decode_image(image)
    assert (queues["q"].skew, queues["q"].skew_stamp) == (2 * HOUR - 1_000, T0 + 1_000)
    fresh = QueueMachine(env.store)
    fresh.restore(9, image)
    assert fresh.encode_image(reuse=False) == env.m.encode_image(reuse=False)
    _, queues = decode_image(v2)
    assert queues["q"].skew == 0
    older = QueueMachine(env.store)
    older.restore(3, v2)  # a version 2 image restores (no skew) and re-encodes as version 2
    assert older.encode_image(reuse=False)[4] == 2
    bad = bytearray(image)
    bad[4] = 8  # a newer version than this release reads: refused, naming both
    with pytest.raises(InvariantBroken, match="image version 8"):
        decode_image(bytes(bad))


def test_restamp_replaces_the_time_of_a_send_and_nothing_else() -> None:
    cmd = Produce("orders", T0 + 2 * HOUR, (msg(1), msg(2, delay=5_000)))
    data = restamp_produce(encode_command(cmd), T0)
    back = decode_command(data)
    assert isinstance(back, Produce)
    assert back.now_ms == T0 and back.queue == "orders"
    assert back.messages == decode_command(encode_command(cmd)).messages  # type: ignore[union-attr]
    with pytest.raises(InvalidParameter):
        restamp_produce(encode_command(Lease("orders", T0, 1, None)), T0)
    with pytest.raises(InvalidParameter):
        restamp_produce(encode_command(cmd)[:6], T0)


def test_a_leased_result_is_unchanged_by_a_retime_in_between() -> None:
    env = Env()
    env.produce(1)
    first = env.lease(1, now=T0 + 100, vis=VIS)
    assert isinstance(first, Leased) and len(first.messages) == 1
    env.run(Retime("q", T0 + 100))  # not ahead: nothing changes
    assert env.lease(1, now=T0 + 100 + VIS - 1).messages == ()
    assert len(env.lease(1, now=T0 + 100 + VIS).messages) == 1


def test_reads_see_the_time_a_command_would_make() -> None:
    """While the lead slews off, `has_visible` and the queue's time at a clock reading agree
    with what a `Lease` at that reading finds (a read that promised more would make a long
    poll propose leases in a loop)."""
    env = Env()
    _frozen(env)
    now = T0 + 1_000
    env.run(Retime("q", now))
    q = env.m._queues["q"]
    for t in range(now, now + 3 * VIS, 97):
        promised = env.m.has_visible("q", t)
        time_seen = env.m.queue_time("q", t)
        got = env.lease(5, now=t, vis=60_000).messages
        assert q.clock == time_seen
        assert promised == bool(got), t
        if got:
            break
    else:
        raise AssertionError("the leases never expired")
