"""The surface checks (`tests.chaos.apicheck`) flag planted FIFO reorderings, early delayed
deliveries and dead-letter miscounts, and pass clean histories of each."""

from __future__ import annotations

import json
from typing import Any

from tests.chaos.checker import check
from tests.chaos.history import Delivery, History, Op, Outcome

FIFO = "f.fifo"


class Api:
    """A hand-written history over named queues; times are explicit."""

    def __init__(self) -> None:
        self.h = History()

    def create(self, queue: str, **attrs: Any) -> None:
        op = self.h.invoke("setup", "create", queue, 1, 0.0)
        self.h.complete(op, 0.0, "ok", json.dumps(attrs))

    def send(
        self,
        queue: str,
        t0: float,
        t1: float,
        keys: list[str],
        *,
        group: str | None = None,
        delay: float = 0.0,
        outcome: Outcome = "ok",
    ) -> Op:
        op = self.h.invoke("p", "send", queue, 1, t0)
        op.keys = keys
        op.groups = [group] * len(keys) if group else []
        op.delays = [delay] * len(keys) if delay else []
        self.h.complete(op, t1, outcome)
        return op

    def receive(
        self, queue: str, t0: float, t1: float, got: list[tuple[str, int, int]], vis: float = 5.0
    ) -> list[str]:
        """``got``: (key, seq, receive_count); returns the receipts."""
        op = self.h.invoke("c", "receive", queue, 1, t0)
        op.visibility = vis
        op.deliveries = [Delivery(k, s, f"{queue}-{k}-{n}-{t0}", n) for k, s, n in got]
        self.h.complete(op, t1, "ok")
        return [d.receipt for d in op.deliveries]

    def ack(
        self, queue: str, t0: float, t1: float, receipts: list[str], *, ok: bool = True
    ) -> None:
        op = self.h.invoke("c", "ack", queue, 1, t0)
        op.receipts = receipts
        op.keys = [r.split("-")[1] for r in receipts]
        op.entry_ok = [ok] * len(receipts)
        self.h.complete(op, t1, "ok")


def fifo_clean() -> Api:
    """Group g: a, b, c sent in order (b's first attempt unknown, resent); a and b received
    together, a acked, b left to expire, b again (then acked), c after it; group h apart."""
    h = Api()
    h.create(FIFO, fifo=True)
    h.send(FIFO, 0.0, 0.1, ["a"], group="g")
    h.send(FIFO, 0.2, 0.3, ["b"], group="g", outcome="unknown")
    h.send(FIFO, 0.4, 0.5, ["b"], group="g")  # the resend: b keeps the seq the first stored
    h.send(FIFO, 0.6, 0.7, ["c"], group="g")
    h.send(FIFO, 0.6, 0.7, ["x"], group="h")
    ra, _ = h.receive(FIFO, 1.0, 1.1, [("a", 1, 1), ("b", 2, 1)], vis=2.0)
    h.ack(FIFO, 1.2, 1.3, [ra])
    h.receive(FIFO, 1.5, 1.6, [("x", 4, 1)])  # another group is not blocked by g
    (rb,) = h.receive(FIFO, 3.5, 3.6, [("b", 2, 2)], vis=2.0)  # after b's lease expired
    h.ack(FIFO, 3.7, 3.8, [rb])
    (rc,) = h.receive(FIFO, 4.0, 4.1, [("c", 3, 1)])
    h.ack(FIFO, 4.2, 4.3, [rc])
    return h


def test_a_clean_fifo_history_passes() -> None:
    rep = check(fifo_clean().h.ops)
    assert rep.ok, rep.failures()
    assert rep.surfaces.fifo_groups == 2 and rep.surfaces.fifo_deliveries == 5


def test_fifo_out_of_order_within_a_receive() -> None:
    h = Api()
    h.create(FIFO, fifo=True)
    h.send(FIFO, 0.0, 0.1, ["a", "b"], group="g")
    h.receive(FIFO, 1.0, 1.1, [("b", 2, 1), ("a", 1, 1)])
    rep = check(h.h.ops)
    assert len(rep.surfaces.fifo_receive_order) == 1 and not rep.ok


def test_fifo_later_message_delivered_while_an_earlier_one_is_leased() -> None:
    h = fifo_clean()
    h.send(FIFO, 5.0, 5.1, ["d", "e"], group="g")
    h.receive(FIFO, 6.0, 6.1, [("d", 5, 1)], vis=5.0)  # d leased until at least 11.0
    (re,) = h.receive(FIFO, 7.0, 7.1, [("e", 6, 1)])  # e while d is in flight: blocked
    h.ack(FIFO, 7.2, 7.3, [re])
    rep = check(h.h.ops)
    assert len(rep.surfaces.fifo_blocked) == 1 and "while d was leased" in str(
        rep.surfaces.fifo_blocked
    )
    assert not rep.ok
    # Once d's lease may have expired (11.0), e may come (d would then come back first, but
    # the receive below does not show the order either way).
    h2 = fifo_clean()
    h2.send(FIFO, 5.0, 5.1, ["d"], group="g")
    h2.receive(FIFO, 6.0, 6.1, [("d", 5, 1)], vis=1.0)
    h2.receive(FIFO, 7.5, 7.6, [("d", 5, 2)])
    assert check(h2.h.ops).ok


def test_fifo_send_order_of_confirmed_sends() -> None:
    h = Api()
    h.create(FIFO, fifo=True)
    h.send(FIFO, 0.0, 0.1, ["a"], group="g")
    h.send(FIFO, 0.2, 0.3, ["b"], group="g")
    # b was first sent after a's send was confirmed, yet has the smaller seq.
    (rb,) = h.receive(FIFO, 1.0, 1.1, [("b", 1, 1)])
    h.ack(FIFO, 1.2, 1.3, [rb])
    (ra,) = h.receive(FIFO, 1.4, 1.5, [("a", 2, 1)])
    h.ack(FIFO, 1.6, 1.7, [ra])
    rep = check(h.h.ops)
    assert len(rep.surfaces.fifo_send_order) == 1 and not rep.ok
    # Sends that overlap in time (or one of unknown outcome) promise no order between them.
    h = Api()
    h.create(FIFO, fifo=True)
    h.send(FIFO, 0.0, 0.3, ["a"], group="g", outcome="unknown")
    h.send(FIFO, 0.2, 0.3, ["b"], group="g")
    (rb,) = h.receive(FIFO, 1.0, 1.1, [("b", 1, 1)])
    h.ack(FIFO, 1.2, 1.3, [rb])
    h.receive(FIFO, 1.4, 1.5, [("a", 2, 1)])
    assert check(h.h.ops).surfaces.fifo_send_order == []


def test_early_delayed_delivery() -> None:
    h = Api()
    h.create("d")
    h.send("d", 0.0, 0.1, ["a"], delay=3.0)
    h.send("d", 0.0, 0.1, ["b"], delay=3.0)
    h.receive("d", 2.3, 2.4, [("a", 1, 1)])  # 0.6 s early: beyond the 0.5 s tolerance
    h.receive("d", 2.6, 2.7, [("b", 2, 1)])  # 0.3 s early: within the clock bound
    rep = check(h.h.ops)
    assert len(rep.surfaces.early_deliveries) == 1 and "(a)" in rep.surfaces.early_deliveries[0]
    assert rep.surfaces.delayed_deliveries == 2 and not rep.ok


def dlq() -> Api:
    h = Api()
    h.create("dl")
    h.create("src", dead_letter_queue="dl", max_receive_count=2)
    h.send("src", 0.0, 0.1, ["p", "q"])
    h.receive("src", 1.0, 1.1, [("p", 1, 1), ("q", 2, 1)], vis=1.0)
    h.receive("src", 2.5, 2.6, [("p", 1, 2), ("q", 2, 2)], vis=1.0)
    # Both moved to the dead-letter queue (new seqs), read there, then redriven back.
    h.receive("dl", 5.0, 5.1, [("p", 1, 1), ("q", 2, 1)], vis=30.0)
    (rp, rq) = h.receive("src", 9.0, 9.1, [("p", 3, 1), ("q", 4, 1)])
    h.ack("src", 9.2, 9.3, [rp, rq])
    return h


def test_dead_letter_moves_and_redrive_are_accounted() -> None:
    rep = check(dlq().h.ops)
    assert rep.ok, rep.failures()
    assert rep.surfaces.dead_lettered == 2 and rep.surfaces.redriven == 2
    assert rep.stored_twice == [] and rep.duplicated == []


def test_dead_letter_miscounts() -> None:
    h = dlq()
    h.receive("dl", 10.0, 10.1, [("p", 7, 1)])  # a second copy of p: moved twice
    h.receive("src", 10.0, 10.1, [("q", 2, 3)])  # q delivered a third time: should have moved
    rep = check(h.h.ops)
    assert len(rep.surfaces.dlq_accounting) == 1 and "p: 2 copies" in rep.surfaces.dlq_accounting[0]
    assert len(rep.surfaces.past_max_receives) == 1 and not rep.ok
    # A copy in the source with no dead-letter copy behind it: a redrive stored twice.
    h = dlq()
    h.receive("src", 10.0, 10.1, [("q", 9, 1)])
    rep = check(h.h.ops)
    assert any("redrive stored twice" in p for p in rep.surfaces.dlq_accounting)


def _moved_unseen(*, ack_original_first: bool) -> Api:
    """``p`` sent; with ``ack_original_first`` its original is delivered and acked before any
    move task, else both its leases are lost (receives whose answers never came, so none is in
    the history); a dead-letter copy is read, a move task redrives it, and the copy back in the
    source is received and acked (seed 12610's history)."""
    h = Api()
    h.create("dl")
    h.create("src", dead_letter_queue="dl", max_receive_count=2)
    h.send("src", 0.0, 0.1, ["p"])
    if ack_original_first:
        h.ack("src", 1.2, 1.3, h.receive("src", 1.0, 1.1, [("p", 1, 1)]))
    h.receive("dl", 5.0, 5.1, [("p", 1, 1)], vis=30.0)
    move = h.h.invoke("mover", "move", "dl", 1, 6.0)
    h.h.complete(move, 6.5, "ok", "COMPLETED moved 1")
    h.ack("src", 7.2, 7.3, h.receive("src", 6.2, 7.1, [("p", 2, 1)]))
    return h


def test_a_dead_letter_copy_of_an_original_never_seen_is_accounted() -> None:
    rep = check(_moved_unseen(ack_original_first=False).h.ops)
    assert rep.surfaces.dlq_accounting == [], rep.surfaces.dlq_accounting
    assert rep.ok, rep.failures()
    # The original seen and acked before the move: its dead-letter copy was moved after an ack.
    rep = check(_moved_unseen(ack_original_first=True).h.ops)
    assert any("moved after a confirmed ack" in p for p in rep.surfaces.dlq_accounting)
