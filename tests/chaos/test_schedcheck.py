"""The scheduling checks (`tests.chaos.schedcheck`: ``deliver_at``, times to live, retry
back-off) flag planted early deliveries, late deliveries after a time to live and early
retries, pass a clean history of each, and `tests.chaos.checker` counts a confirmed message
with a time to live that nothing delivered as expired, not lost (one without is still lost)."""

from __future__ import annotations

import json

import pytest

from tests.chaos.apicheck import CLOCK_JUDGED, backoff
from tests.chaos.checker import check
from tests.chaos.history import Delivery, History, Outcome
from tests.chaos.surfaces import DELAY_ATTRIBUTES, FAR_SHARE, TTL_SHARE, schedule

Q = "d"
WALL = 1_000_000.0
"""The runner's wall clock when the history's monotonic clock read 0."""


class Sched:
    """A hand-written history of one queue with the chaos run's retry policy (1, 2, 4 s)."""

    def __init__(self) -> None:
        self.h = History()
        op = self.h.invoke("setup", "create", Q, 1, 0.0)
        self.h.complete(op, 0.0, "ok", json.dumps(DELAY_ATTRIBUTES))

    def send(
        self,
        t0: float,
        t1: float,
        key: str,
        *,
        deliver_in: float = 0.0,
        ttl: float = 0.0,
        outcome: Outcome = "ok",
    ) -> None:
        """``deliver_in``: a ``deliver_at`` that many seconds after ``t0`` (wall clock)."""
        op = self.h.invoke("p", "send", Q, 1, t0)
        op.keys = [key]
        op.wall = WALL + t0
        op.deliver_at = [WALL + t0 + deliver_in if deliver_in else 0.0]
        op.ttls = [ttl]
        self.h.complete(op, t1, outcome)

    def receive(self, t0: float, t1: float, key: str, count: int, vis: float = 2.0) -> str:
        op = self.h.invoke("c", "receive", Q, 1, t0)
        op.visibility = vis
        op.deliveries = [Delivery(key, ord(key[0]), f"{key}-{count}", count)]
        self.h.complete(op, t1, "ok")
        return op.deliveries[0].receipt

    def settle(self, kind: str, t0: float, t1: float, receipt: str, key: str) -> None:
        op = self.h.invoke("c", "ack" if kind == "ack" else "nack", Q, 1, t0)
        op.receipts, op.keys, op.entry_ok = [receipt], [key], [True]
        self.h.complete(op, t1, "ok")


def clean() -> Sched:
    """a: deliver_at 2 s ahead, delivered after it; b: ttl 3, delivered in time; c: ttl 1,
    never delivered (expired); e: lease 1 expires (3.0 + 2), back after 1 s; lease 2 nacked at
    7.0, back after 2 s; then acked."""
    h = Sched()
    h.send(0.0, 0.1, "a", deliver_in=2.0)
    h.send(0.0, 0.1, "b", ttl=3.0)
    h.send(0.0, 0.1, "c", ttl=1.0)
    h.send(0.0, 0.1, "e")
    h.settle("ack", 2.3, 2.4, h.receive(2.0, 2.2, "a", 1), "a")
    h.settle("ack", 1.1, 1.2, h.receive(1.0, 1.05, "b", 1), "b")
    h.receive(3.0, 3.1, "e", 1)
    h.settle("nack", 7.0, 7.1, h.receive(6.1, 6.2, "e", 2), "e")
    h.settle("ack", 9.3, 9.4, h.receive(9.1, 9.2, "e", 3), "e")
    return h


def test_a_clean_scheduling_history_passes() -> None:
    rep = check(clean().h.ops)
    assert rep.ok, rep.failures()
    s = rep.surfaces
    assert (s.scheduled_deliveries, s.ttl_deliveries, s.expired_unseen, s.retried) == (1, 1, 1, 2)
    assert rep.lost == []  # c expired: not lost


def test_a_confirmed_message_without_ttl_that_nobody_received_is_still_lost() -> None:
    h = clean()
    h.send(10.0, 10.1, "f")
    h.send(10.0, 10.1, "g", ttl=2.0)
    rep = check(h.h.ops)
    assert rep.lost == ["f"] and rep.surfaces.expired_unseen == 2


def test_planted_delivery_before_deliver_at() -> None:
    h = clean()
    h.send(10.0, 10.1, "h", deliver_in=3.0)  # due at 13.0
    h.receive(12.0, 12.4, "h", 1)  # ended 0.6 s early: beyond the 0.5 s clock bound
    rep = check(h.h.ops)
    assert len(rep.surfaces.early_deliveries) == 1 and "(h)" in rep.surfaces.early_deliveries[0]
    assert not rep.ok
    h2 = clean()
    h2.send(10.0, 10.1, "h", deliver_in=3.0)
    h2.receive(12.0, 12.6, "h", 1)  # within the bound
    assert check(h2.h.ops).ok


def test_deliver_at_is_judged_on_the_wall_clock_of_the_send() -> None:
    """A wall clock that stepped since the history began moves the due time with it."""
    h = clean()
    h.send(10.0, 10.1, "h", deliver_in=3.0)
    op = h.h.ops[-1]  # the runner's wall clock stepped a minute ahead before this send:
    op.wall += 60.0  # deliver_at was computed from the same stepped clock
    op.deliver_at = [t + 60.0 for t in op.deliver_at]
    h.receive(12.0, 12.2, "h", 1)  # due at 13.0 on the monotonic clock all the same
    assert check(h.h.ops).surfaces.early_deliveries


def test_planted_delivery_after_the_time_to_live() -> None:
    h = clean()
    h.send(10.0, 10.2, "t", ttl=3.0)  # surely expired at 13.2
    h.receive(14.3, 14.4, "t", 1)  # began 1.1 s later: beyond the 1 s slack
    rep = check(h.h.ops)
    assert len(rep.surfaces.late_ttl_deliveries) == 1, rep.surfaces
    assert not rep.ok
    h2 = clean()
    h2.send(10.0, 10.2, "t", ttl=3.0)
    h2.receive(14.1, 14.4, "t", 1)  # within the slack
    assert check(h2.h.ops).ok
    h3 = clean()  # never confirmed: the stamp is unbounded, not judged
    h3.send(10.0, 15.0, "t", ttl=3.0, outcome="unknown")
    h3.receive(30.0, 30.1, "t", 1)
    rep3 = check(h3.h.ops)
    assert rep3.ok and rep3.recovered == ["t"]


@pytest.mark.parametrize(
    ("nack_at", "again", "early"),
    [
        (None, (5.1, 5.2), True),  # expired at >= 5.0, back after 1 s: 5.2 < 6.0 - 0.5
        (None, (5.4, 5.6), False),  # within the clock bound
        (4.0, (4.2, 4.3), True),  # nacked at 4.0, back after 1 s
        (4.0, (4.5, 4.9), False),
    ],
)
def test_planted_retry_before_its_back_off(
    nack_at: float | None, again: tuple[float, float], early: bool
) -> None:
    h = Sched()
    h.send(0.0, 0.1, "r")
    receipt = h.receive(3.0, 3.1, "r", 1)
    if nack_at is not None:
        h.settle("nack", nack_at, nack_at + 0.1, receipt, "r")
    h.settle("ack", 7.0, 7.1, h.receive(*again, "r", 2), "r")
    rep = check(h.h.ops)
    assert bool(rep.surfaces.early_retries) == early, rep.surfaces
    assert rep.ok != early


def test_the_third_lease_waits_the_doubled_back_off() -> None:
    h = Sched()
    h.send(0.0, 0.1, "r")
    h.receive(1.0, 1.1, "r", 1)  # expires at >= 3.0, back at >= 4.0
    h.receive(4.0, 4.1, "r", 2)  # expires at >= 6.0, back at >= 8.0 (2 s)
    h.receive(7.0, 7.2, "r", 3)
    rep = check(h.h.ops)
    assert len(rep.surfaces.early_retries) == 1 and "lease 3" in rep.surfaces.early_retries[0]
    assert [backoff((1, 2, 4), n) for n in (1, 2, 3, 4)] == [1, 2, 4, 4]


def test_scheduling_failures_are_clock_judged() -> None:
    """Runs with clock jumps report them without failing (as lease overlaps)."""
    for name in ("early_deliveries=", "late_ttl_deliveries=", "early_retries="):
        assert name.startswith(CLOCK_JUDGED)


class _Choices:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def choices(self, *what: object) -> object:
        import random

        return random.Random(f"{self.seed}/" + "/".join(map(str, what)))


def test_the_workload_schedule_is_seeded_and_mixes_every_kind() -> None:
    plans = [schedule(_Choices(7), "delay-producer-0", b, 5) for b in range(1, 201)]  # type: ignore[arg-type]
    again = schedule(_Choices(7), "delay-producer-0", 1, 5)  # type: ignore[arg-type]
    assert again.delays == plans[0].delays and again.ttls == plans[0].ttls
    delays = [d for p in plans for d in p.delays]
    at = [t for p in plans for t in p.deliver_at]
    ttls = [t for p in plans for t in p.ttls]
    assert all(0 <= d <= 3 or (901 <= d <= 3000 and t) for d, t in zip(delays, ttls, strict=True))
    assert any(d > 900 for d in delays) and any(delays)
    assert any(t is not None for t in at) and any(t is None for t in at)
    assert all(not (d and t) for d, t in zip(delays, at, strict=True))
    share = sum(t > 0 for t in ttls) / len(ttls)
    assert abs(share - TTL_SHARE - FAR_SHARE) < 0.12 and all(0 <= t <= 6 for t in ttls)
