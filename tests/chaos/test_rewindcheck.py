"""The rewind checks (`tests.chaos.rewindcheck`) tell a legal redelivery after an ack (a copy
a rewind brought back) from an illegal one, and pass a clean history with ok and unknown
rewinds. Fast: hand-written histories, no processes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.chaos.apicheck import CLOCK_JUDGED
from tests.chaos.checker import check
from tests.chaos.history import Delivery, History, Outcome
from tests.chaos.rewindcheck import check_rewinds
from tests.chaos.runner import RunConfig, RunResult
from tests.chaos.surfaces import REWIND_MARGIN, acked_send_wall

Q = "w"
WALL = 1000.0
"""The runner's wall clock minus its monotonic clock in these histories."""


class Rw:
    """A hand-written history of one rewound queue; times are explicit (monotonic seconds)."""

    def __init__(self) -> None:
        self.h = History()
        op = self.h.invoke("setup", "create", Q, 1, 0.0)
        self.h.complete(op, 0.0, "ok", json.dumps({"retain_acked_seconds": 600}))

    def send(self, t0: float, t1: float, keys: list[str], outcome: Outcome = "ok") -> None:
        op = self.h.invoke("p", "send", Q, 1, t0)
        op.keys = keys
        op.wall = t0 + WALL
        self.h.complete(op, t1, outcome)

    def receive(self, t0: float, t1: float, got: list[tuple[str, int, int]]) -> list[str]:
        """``got``: (key, seq, receive_count); returns the receipts."""
        op = self.h.invoke("c", "receive", Q, 1, t0)
        op.visibility = 5.0
        op.deliveries = [Delivery(k, s, f"r-{k}-{s}-{n}", n) for k, s, n in got]
        self.h.complete(op, t1, "ok")
        return [d.receipt for d in op.deliveries]

    def ack(self, t0: float, t1: float, receipts: list[str]) -> None:
        op = self.h.invoke("c", "ack", Q, 1, t0)
        op.receipts = receipts
        op.keys = [r.split("-")[1] for r in receipts]
        op.entry_ok = [True] * len(receipts)
        self.h.complete(op, t1, "ok")

    def rewind(
        self, t0: float, t1: float, since: float, outcome: Outcome = "ok", count: int = -1
    ) -> None:
        """A rewind to ``since`` (monotonic; recorded on the wall clock)."""
        op = self.h.invoke("rewinder", "rewind", Q, 1, t0)
        op.wall = t0 + WALL
        op.since = since + WALL
        op.rewound = count if outcome == "ok" else -1
        self.h.complete(op, t1, outcome)


def clean() -> Rw:
    """a and b acked, rewound (ok: both come back, as new seqs), acked again; a second rewind
    of unknown outcome brings a back once more and not b (allowed, not required); c, sent
    after the first rewind, is left alone by it."""
    h = Rw()
    h.send(0.0, 0.1, ["a", "b"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("a", 1, 1), ("b", 2, 1)]))
    h.rewind(2.0, 2.1, since=-0.5, count=2)
    ra, rb = h.receive(3.0, 3.1, [("a", 3, 1), ("b", 4, 1)])
    h.ack(3.2, 3.3, [ra, rb])
    h.send(5.0, 5.1, ["c"])
    h.ack(6.2, 6.3, h.receive(6.0, 6.1, [("c", 5, 1)]))
    h.rewind(7.0, 12.0, since=-0.5, outcome="unknown")
    h.ack(12.2, 12.3, h.receive(12.0, 12.1, [("a", 6, 1)]))
    return h


def acked_then_rewound() -> Rw:
    """a and b acked, then a rewind to before their send that answers ok and says it made one
    message deliverable again."""
    h = Rw()
    h.send(0.0, 0.1, ["a", "b"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("a", 1, 1), ("b", 2, 1)]))
    h.rewind(2.0, 2.1, since=-0.5, count=1)
    return h


def test_a_clean_history_with_rewinds_passes() -> None:
    rep = check(clean().h.ops)
    assert rep.ok, rep.failures()
    assert rep.stored_twice == [] and rep.duplicated == [] and rep.redelivered_after_ack == []
    rw = rep.rewind
    assert rw.rewinds == {"ok": 1, "unknown": 1} and rw.reported == 2
    assert rw.copies == 3 and rw.judged == 3
    assert rw.allowed == 5  # a and b: both rewinds; c: the unknown one
    assert rw.required == 2  # the ok rewind had to bring back a and b


def test_an_acked_message_back_without_any_rewind_is_flagged() -> None:
    h = Rw()
    h.send(0.0, 0.1, ["d"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("d", 1, 1)]))
    h.receive(5.0, 5.1, [("d", 2, 1)])  # a new seq of d: nothing asked for it
    rep = check(h.h.ops)
    assert not rep.ok
    assert len(rep.rewind.rewind_extra) == 1 and "only 0 rewinds" in rep.rewind.rewind_extra[0]
    assert rep.rewind.rewind_outside  # delivered after its confirmed ack: nothing covers it


def test_an_acked_message_back_from_a_rewind_that_does_not_reach_it_is_flagged() -> None:
    h = Rw()
    h.send(0.0, 0.1, ["d"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("d", 1, 1)]))
    h.rewind(2.0, 2.1, since=1.5, count=1)  # since after d's send (by more than the bound)
    h.receive(3.0, 3.1, [("d", 2, 1)])
    rep = check_rewinds(h.h.ops)
    assert rep.rewind_extra == []
    assert len(rep.rewind_outside) == 2, rep.rewind_outside
    assert "reach back" in rep.rewind_outside[0]
    assert all(f.startswith(CLOCK_JUDGED) for f in rep.failures())


def test_a_send_near_since_may_come_back_within_the_clock_bound() -> None:
    h = Rw()
    h.send(0.0, 0.1, ["d"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("d", 1, 1)]))
    h.rewind(2.0, 2.1, since=0.4, count=1)  # the stamp may be 0.5 s off: it may cover d
    h.ack(3.2, 3.3, h.receive(3.0, 3.1, [("d", 2, 1)]))
    rep = check_rewinds(h.h.ops)
    assert rep.failures() == [] and rep.required == 0  # allowed, not required


def test_a_message_rewound_twice_by_one_rewind_is_flagged() -> None:
    h = clean()
    h.receive(13.0, 13.1, [("b", 7, 1)])  # b came back from the unknown rewind: allowed
    h.receive(14.0, 14.1, [("b", 8, 1)])  # and once more: two copies from one rewind
    rep = check(h.h.ops)
    assert not rep.ok
    (extra,) = rep.rewind.rewind_extra
    assert "b came back 3 times" in extra and "only 2 rewinds" in extra


def test_a_rewind_answered_ok_must_bring_back_what_it_covered() -> None:
    h = acked_then_rewound()
    h.ack(3.2, 3.3, h.receive(3.0, 3.1, [("a", 3, 1)]))  # b never comes back
    rep = check(h.h.ops)
    assert not rep.ok
    (missed,) = rep.rewind.rewind_missed
    assert "b (acked before rewind op" in missed
    # An unknown rewind instead requires nothing.
    h = Rw()
    h.send(0.0, 0.1, ["a"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("a", 1, 1)]))
    h.rewind(2.0, 7.0, since=-0.5, outcome="unknown")
    assert check(h.h.ops).ok


def test_a_copy_still_live_from_an_earlier_rewind_satisfies_a_later_one() -> None:
    h = Rw()
    h.send(0.0, 0.1, ["a"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("a", 1, 1)]))
    h.rewind(2.0, 2.1, since=-0.5, count=1)
    (r,) = h.receive(3.0, 3.1, [("a", 2, 1)])  # the copy, leased
    h.rewind(4.0, 4.1, since=-0.5, count=0)  # its copy is live: not copied again
    h.ack(5.0, 5.1, [r])
    rep = check_rewinds(h.h.ops)
    assert rep.failures() == [] and rep.required == 2


def test_the_acked_record_itself_coming_back_is_a_redelivery_after_ack() -> None:
    h = clean()
    h.receive(20.0, 20.1, [("c", 5, 2)])  # c's own seq after its confirmed ack
    rep = check(h.h.ops)
    assert not rep.ok and len(rep.redelivered_after_ack) >= 1
    assert rep.rewind.failures() == []  # same seq: not a copy


def test_more_copies_than_the_rewinds_said_are_reported_not_failed() -> None:
    """A router's repeat of a rewind whose outcome it did not know applies it twice under one
    answer, so the count is a figure, not a rule."""
    h = acked_then_rewound()
    h.ack(3.2, 3.3, h.receive(3.0, 3.1, [("a", 3, 1), ("b", 4, 1)]))
    rep = check_rewinds(h.h.ops)
    assert rep.rewind_count == ["w: 2 rewound copies delivered, but its rewinds said 1"]
    assert rep.failures() == []


def test_a_send_stored_twice_on_a_rewound_queue_is_reported() -> None:
    h = Rw()
    h.send(0.0, 0.1, ["e"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("e", 1, 1), ("e", 2, 1)]))
    rep = check(h.h.ops)
    assert rep.stored_twice == ["e"] and "e" in rep.duplicated


def test_rewind_failures_through_the_clocks_are_clock_judged() -> None:
    assert "rewind_outside=".startswith(CLOCK_JUDGED)
    assert "rewind_missed=".startswith(CLOCK_JUDGED)
    assert not "rewind_extra=".startswith(CLOCK_JUDGED)


def test_an_ack_answered_stale_may_have_applied() -> None:
    """The router repeats an ack attempt of unknown outcome; the repeat answers the entry the
    first attempt deleted as stale. A rewind may then bring the message back (seen in the
    whole-node simulator)."""
    h = Rw()
    h.send(0.0, 0.1, ["a"])
    (r,) = h.receive(1.0, 1.1, [("a", 1, 1)])
    op = h.h.invoke("c", "ack", Q, 1, 1.2)
    op.receipts, op.keys, op.entry_ok = [r], ["a"], [False]
    h.h.complete(op, 2.0, "ok")
    h.rewind(3.0, 3.1, since=-0.5, count=1)
    h.ack(4.2, 4.3, h.receive(4.0, 4.1, [("a", 2, 1)]))
    rep = check(h.h.ops)
    assert rep.ok, rep.failures()
    assert rep.stored_twice == [] and rep.rewind.copies == 1
    assert rep.rewind.required == 0  # its ack was never confirmed: nothing required


def test_the_rewind_report_lists_failures_and_notes_as_the_main_report_does() -> None:
    """`RewindReport` has `Report`'s shape (failures, notes, ok), and the main report carries
    its notes as it carries its failures, so the runner prints both alike."""
    h = acked_then_rewound()
    h.ack(3.2, 3.3, h.receive(3.0, 3.1, [("a", 3, 1), ("b", 4, 1)]))
    rw = check_rewinds(h.h.ops)
    assert rw.ok and rw.failures() == []
    assert rw.notes() == [
        "rewind_count=1 e.g. ['w: 2 rewound copies delivered, but its rewinds said 1']"
    ]
    rep = check(h.h.ops)
    assert rep.ok and rep.notes() == rw.notes()

    h.receive(5.0, 5.1, [("a", 5, 1)])  # a third fresh seq of a: one rewind cannot explain it
    rep = check(h.h.ops)
    assert not rep.ok and not rep.rewind.ok
    assert [f.split("=")[0] for f in rep.rewind.failures()] == ["rewind_extra"]
    assert rep.rewind.failures()[0] in rep.failures()


def test_a_run_with_clock_jumps_notes_the_clock_judged_failures_instead_of_failing() -> None:
    h = Rw()
    h.send(0.0, 0.1, ["d"])
    h.ack(1.2, 1.3, h.receive(1.0, 1.1, [("d", 1, 1)]))
    h.rewind(2.0, 2.1, since=1.5, count=1)  # since after d's send: rewind_outside
    h.receive(3.0, 3.1, [("d", 2, 1)])
    rep = check(h.h.ops)
    (outside,) = rep.rewind.failures()
    assert outside.startswith("rewind_outside=2 ")

    def result(faults: Counter[str]) -> RunResult:
        return RunResult(RunConfig(seed=1), rep, faults, [], [], {}, True, [], 0.0, Path("."), {})

    assert outside in result(Counter()).failures() and outside not in result(Counter()).notes()
    jumped = result(Counter({"clock-jump": 1}))
    assert outside not in jumped.failures() and outside in jumped.notes()


def test_a_rewind_to_before_the_last_acked_send_is_one_the_checker_requires() -> None:
    """The chaos rewinder's reach (`tests.chaos.surfaces.acked_send_wall`): a rewind placed
    `REWIND_MARGIN` before the send of the message acked last must bring that message back, so
    the bounded pass's coverage check (``required``) holds however far the consumer lags."""
    h = Rw()
    h.send(0.0, 0.1, ["a"])
    h.send(0.5, 0.6, ["b"])  # sent later, never acked: not the reference
    h.ack(9.2, 9.3, h.receive(9.0, 9.1, [("a", 1, 1)]))
    h.receive(9.4, 9.5, [("b", 2, 1)])
    at = acked_send_wall(h.h.ops, Q)
    assert at == 0.0 + WALL
    h.rewind(10.0, 10.1, since=at - WALL - REWIND_MARGIN, count=1)
    h.receive(11.0, 11.1, [("a", 3, 1)])
    rep = check_rewinds(h.h.ops)
    assert rep.failures() == [] and rep.required == 1
    assert acked_send_wall(h.h.ops, "elsewhere") is None
