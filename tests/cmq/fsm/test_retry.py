"""Retry back-off (`cmq.model.RetryPolicy`, the queue attribute ``retry``) in the queue machine:
an expired lease or a nack brings its message back only after the policy's delay for its
receive count; a backing-off message is delayed (not in flight, not leasable, not nackable),
its expired lease may still be acked, its FIFO group stays blocked, the dead-letter limit moves
it without delay, and all of it survives a snapshot and restore and replays identically."""

from __future__ import annotations

import random

import pytest

from cmq.errors import InvalidParameter
from cmq.fsm import Ack, Nack, QueueMachine
from cmq.fsm.commands import Lease, Leased, SetAttributes
from cmq.fsm.gauges import queue_gauges
from cmq.model import QueueAttributes, RetryPolicy

from .harness import Applier
from .test_fifo import Fifo, fm
from .test_machine import T0, Env

VIS = 1_000
POLICY = RetryPolicy(initial_seconds=2, multiplier=2.0, max_seconds=10)


def _env(**kw: object) -> Env:
    return Env(QueueAttributes(visibility_timeout=1, retry=POLICY, **kw))  # type: ignore[arg-type]


def test_delays_grow_by_the_multiplier_up_to_the_maximum() -> None:
    assert [POLICY.delay_ms(n) for n in range(1, 7)] == [
        2_000,
        4_000,
        8_000,
        10_000,
        10_000,
        10_000,
    ]
    slow = RetryPolicy(1, 1.5, 100)
    assert [slow.delay_ms(n) for n in (1, 2, 3, 4)] == [1_000, 1_500, 2_250, 3_375]
    flat = RetryPolicy(7, 1.0, 7)
    assert {flat.delay_ms(n) for n in range(1, 1_000)} == {7_000}
    assert RetryPolicy(1, 10.0, 43_200).delay_ms(10**9) == 43_200_000  # bounded work


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"multiplier": 2}, "initial_seconds"),
        ({"initial_seconds": 0}, "initial_seconds"),
        ({"initial_seconds": 5, "max_seconds": 4}, "max_seconds"),
        ({"initial_seconds": 1, "multiplier": 0.5}, "multiplier"),
        ({"initial_seconds": 1, "multiplier": 1.234}, "multiplier"),
        ({"initial_seconds": 1, "multiplier": True}, "multiplier"),
        ({"initial_seconds": 1, "jitter": 1}, "jitter"),
        ("fast", "retry"),
    ],
)
def test_bad_policies_are_refused_naming_the_field(policy: object, field: str) -> None:
    with pytest.raises(InvalidParameter, match=field):
        QueueAttributes.from_dict({"retry": policy})


def test_policy_round_trips_through_attributes_dicts() -> None:
    a = QueueAttributes.from_dict({"retry": {"initial_seconds": 3, "multiplier": 1.25}})
    assert a.retry == RetryPolicy(3, 1.25, 300)
    assert QueueAttributes.from_dict(a.to_dict()) == a
    assert a.merged({"retry": None}).retry is None


def test_an_expired_lease_comes_back_after_the_back_off_for_its_count() -> None:
    e = _env()
    e.produce(1)
    t = T0
    for count, delay in enumerate((2_000, 4_000, 8_000, 10_000), start=1):
        leased = e.lease(1, t)
        assert [m.receive_count for m in leased.messages] == [count]
        expiry = t + VIS
        # Expired, backing off: delayed, not visible, until expiry + delay.
        assert e.lease(1, expiry).messages == ()
        stats = e.m.stats("q", expiry + 1)
        assert stats is not None and (stats.in_flight, stats.delayed, stats.visible) == (0, 1, 0)
        assert e.lease(1, expiry + delay - 1).messages == ()
        t = expiry + delay
    assert len(e.lease(1, t).messages) == 1


def test_without_a_policy_an_expired_lease_is_visible_at_once() -> None:
    e = Env(QueueAttributes(visibility_timeout=1))
    e.produce(1)
    e.lease(1, T0)
    assert len(e.lease(1, T0 + VIS).messages) == 1


def test_a_backing_off_message_can_be_acked_but_not_nacked_or_extended() -> None:
    e = _env()
    e.produce(2)
    leased = e.lease(2, T0).messages
    a, b = ((m.seq, m.lease_id) for m in leased)
    later = T0 + VIS + 500
    assert e.outcomes(Nack("q", later, (a,), 0)) == ("MessageNotInflight",)
    assert e.outcomes(Ack("q", later, (b,))) == (None,)  # an expired lease not replaced
    stats = e.m.stats("q", later)
    assert stats is not None and (stats.delayed, stats.visible, stats.in_flight) == (1, 0, 0)
    again = e.lease(2, T0 + VIS + 2_000).messages
    assert [m.seq for m in again] == [a[0]]
    assert e.outcomes(Ack("q", T0 + VIS + 2_000, (a,))) == ("LeaseStale",)  # replaced


def test_a_nack_waits_for_the_longer_of_its_delay_and_the_back_off() -> None:
    e = _env()
    e.produce(2)
    x, y = ((m.seq, m.lease_id) for m in e.lease(2, T0).messages)
    assert e.outcomes(Nack("q", T0 + 10, (x,), 0)) == (None,)  # back-off 2 s wins
    assert e.outcomes(Nack("q", T0 + 10, (y,), 5_000)) == (None,)  # its own 5 s wins
    assert e.lease(2, T0 + 2_009).messages == ()
    assert [m.seq for m in e.lease(2, T0 + 2_010).messages] == [x[0]]
    assert e.lease(2, T0 + 5_009).messages == ()
    assert [m.seq for m in e.lease(2, T0 + 5_010).messages] == [y[0]]


def test_the_dead_letter_limit_moves_a_message_without_back_off() -> None:
    e = _env(dead_letter_queue="dlq", max_receive_count=2)
    e.produce(1)
    e.lease(1, T0)  # receive 1: back-off 2 s after its expiry
    assert e.lease(1, T0 + VIS + 1_999).messages == ()
    e.lease(1, T0 + VIS + 2_000)  # receive 2: the limit, no back-off after this one
    res = e.lease(1, T0 + VIS + 2_000 + VIS)
    assert res.messages == () and res.dead_letter == (1,)


def test_a_backing_off_fifo_head_keeps_its_group_blocked() -> None:
    f = Fifo(QueueAttributes(fifo=True, visibility_timeout=1, retry=POLICY))
    f.send(fm(1, "g"), fm(2, "g"))
    assert [m.seq for m in f.lease(1).messages] == [1]  # g is blocked behind it now
    assert f.lease(10, T0 + 500).messages == ()
    # Message 1's lease expires at T0 + 1 s; it backs off 2 s and keeps g blocked meanwhile.
    assert f.lease(10, T0 + VIS + 1_000).messages == ()
    assert [m.seq for m in f.lease(10, T0 + VIS + 2_000).messages] == [1, 2]


def test_back_off_survives_snapshot_and_restore() -> None:
    e = _env()
    e.produce(3)
    e.lease(3, T0)
    e.lease(3, T0 + VIS + 100)  # expired: backing off until T0 + 3 s
    fresh = QueueMachine(e.store)
    fresh.restore(7, e.m.snapshot())
    assert fresh.encode_image() == e.m.encode_image()
    for m in (e.m, fresh):
        run = Applier(m)
        run.index = 100
        early = run(Lease("q", T0 + 2_999, 3, None))
        assert isinstance(early, Leased) and early.messages == ()
        due = run(Lease("q", T0 + 3_000, 3, None))
        assert isinstance(due, Leased)
        assert [(x.seq, x.receive_count) for x in due.messages] == [(1, 2), (2, 2), (3, 2)]


def test_setting_a_policy_applies_to_leases_expiring_after_it() -> None:
    e = Env(QueueAttributes(visibility_timeout=1))
    e.produce(1)
    e.lease(1, T0)
    e.run(SetAttributes("q", QueueAttributes(visibility_timeout=1, retry=POLICY)))
    assert e.lease(1, T0 + VIS).messages == ()
    assert len(e.lease(1, T0 + VIS + 2_000).messages) == 1


def test_random_histories_with_back_off_replay_to_identical_images() -> None:
    for seed in range(20):
        runs = []
        for _ in range(2):
            e = _env()
            r = random.Random(seed)
            t = T0
            leases: list[tuple[int, int]] = []
            for i in range(200):
                t += r.randint(0, 1_500)
                op = r.random()
                if op < 0.3:
                    e.produce(1, t, start=i)
                elif op < 0.7:
                    leases += [(m.seq, m.lease_id) for m in e.lease(r.randint(1, 3), t).messages]
                elif leases and op < 0.85:
                    e.run(Ack("q", t, (leases.pop(r.randrange(len(leases))),)))
                elif leases:
                    e.run(Nack("q", t, (leases.pop(r.randrange(len(leases))),), r.randint(0, 3)))
            runs.append(e.m.encode_image())
        assert runs[0] == runs[1], seed


def test_the_metrics_gauges_follow_a_lease_into_its_back_off() -> None:
    """The per-queue gauges (cached until the next change) count a lease in flight until its
    deadline and delayed while it backs off, as the stats do."""
    e = _env()
    e.produce(1)
    e.lease(1, T0)
    q = e.m._queues["q"]
    for now, (in_flight, delayed, visible) in (
        (T0 + 500, (1, 0, 0)),
        (T0 + 1_500, (0, 1, 0)),
        (T0 + 3_000, (0, 0, 1)),
    ):
        g = queue_gauges(q, now)
        assert (g.in_flight, g.delayed, g.visible) == (in_flight, delayed, visible), now
        stats = e.m.stats("q", now)
        assert stats is not None
        assert (stats.in_flight, stats.delayed, stats.visible) == (in_flight, delayed, visible)
