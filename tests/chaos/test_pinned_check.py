"""`check_pinned`: a confirm to a client pinned to the minority side of a partition fails the
run, errors and empty reads there do not; the majority-side consumer must make progress."""

from __future__ import annotations

from tests.chaos.checker import check, check_pinned
from tests.chaos.history import Delivery, History, Op, OpKind, Outcome


def op(
    h: History, process: str, kind: OpKind, t0: float, t1: float, *, outcome: Outcome, **kw: object
) -> Op:
    o = h.invoke(process, kind, "q", 1, t0)
    for name, value in kw.items():
        setattr(o, name, value)
    h.complete(o, t1, outcome)
    return o


def refused_minority(h: History) -> None:
    for i in range(4):
        op(h, "pinned1-minority-producer", "send", i, i + 2, outcome="unknown", keys=[f"m{i}"])
        op(h, "pinned1-minority-consumer", "receive", i, i + 0.1, outcome="failed")
    op(h, "pinned1-minority-consumer", "receive", 5, 5.1, outcome="ok")  # empty: confirms nothing
    d = Delivery("a", 1, "r1", 1)
    op(h, "p", "send", 0, 0.1, outcome="ok", keys=["a"])
    op(h, "pinned1-majority-consumer", "receive", 1, 1.1, outcome="failed")
    op(
        h,
        "pinned1-majority-consumer",
        "receive",
        2,
        2.1,
        outcome="ok",
        deliveries=[d],
        visibility=5.0,
    )
    op(h, "pinned1-majority-consumer", "ack", 2.2, 2.3, outcome="ok", receipts=["r1"], keys=["a"])
    op(h, "pinned1-majority-consumer", "receive", 5, 5.1, outcome="ok")


def test_errors_on_the_minority_and_progress_on_the_majority_pass() -> None:
    h = History()
    refused_minority(h)
    rep = check(h.ops)
    assert rep.failures() == [], rep.failures()
    assert rep.pinned.episodes == 1 and rep.pinned.minority_ops == 9
    assert rep.pinned.minority_refused == 8 and rep.pinned.minority_empty_reads == 1
    assert rep.pinned.majority_ok == 2


def test_a_confirmed_minority_send_or_lease_fails() -> None:
    h = History()
    refused_minority(h)
    op(h, "pinned1-minority-producer", "send", 6, 6.1, outcome="ok", keys=["x"])
    got = [Delivery("x", 2, "r2", 1)]
    op(
        h,
        "pinned1-minority-consumer",
        "receive",
        6,
        6.1,
        outcome="ok",
        deliveries=got,
        visibility=5.0,
    )
    rep = check(h.ops)
    assert len(rep.pinned.minority_confirms) == 2
    assert any(f.startswith("minority_confirms=2") for f in rep.failures()), rep.failures()


def test_a_stalled_majority_consumer_fails_only_over_a_long_enough_window() -> None:
    h = History()
    for i in range(5):
        op(h, "pinned2-majority-consumer", "receive", i, i + 0.5, outcome="unknown")
    assert check_pinned(h.ops).majority_stalled == [
        "pinned2: no receive of the majority-side consumer succeeded in 4.5s"
    ]
    short = History()
    op(short, "pinned3-majority-consumer", "receive", 0, 2.0, outcome="unknown")
    assert check_pinned(short.ops).majority_stalled == []
