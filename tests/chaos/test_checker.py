"""The chaos checker flags planted anomalies and passes a clean history."""

from __future__ import annotations

from pathlib import Path

from tests.chaos.checker import check, check_replicas
from tests.chaos.history import Delivery, History, Op, Outcome, load_jsonl


class Builder:
    """A hand-written history; times are explicit."""

    def __init__(self) -> None:
        self.h = History()

    def send(self, t0: float, t1: float, keys: list[str], outcome: Outcome = "ok") -> Op:
        op = self.h.invoke("p", "send", "q", 1, t0)
        op.keys = keys
        self.h.complete(op, t1, outcome)
        return op

    def receive(
        self, t0: float, t1: float, got: list[tuple[str, int, int]], vis: float = 5.0
    ) -> list[str]:
        """``got``: (key, seq, receive_count); returns the receipts."""
        op = self.h.invoke("c", "receive", "q", 1, t0)
        op.visibility = vis
        op.deliveries = [Delivery(k, s, f"r-{k}-{n}-{t0}", n) for k, s, n in got]
        self.h.complete(op, t1, "ok")
        return [d.receipt for d in op.deliveries]

    def settle(
        self,
        kind: str,
        t0: float,
        t1: float,
        receipts: list[str],
        *,
        ok: bool = True,
        outcome: Outcome = "ok",
    ) -> None:
        op = self.h.invoke("c", "ack" if kind == "ack" else "nack", "q", 1, t0)
        op.receipts = receipts
        op.keys = [r.split("-")[1] for r in receipts]
        op.entry_ok = [ok] * len(receipts) if outcome == "ok" else []
        self.h.complete(op, t1, outcome)


def clean() -> Builder:
    b = Builder()
    b.send(0.0, 0.1, ["a", "b"])
    b.send(0.2, 0.3, ["c"], outcome="unknown")  # recovered below
    b.send(0.4, 0.5, ["d"], outcome="unknown")  # never stored: fine
    ra, rb = b.receive(1.0, 1.1, [("a", 1, 1), ("b", 2, 1)], vis=2.0)
    b.settle("ack", 1.2, 1.3, [ra])
    b.settle("nack", 1.2, 1.3, [rb])
    b.receive(1.4, 1.5, [("b", 2, 2)], vis=2.0)  # after the nack: fine
    # b's lease is left to expire; a long poll that began before the deadline gets it after.
    (rb3,) = b.receive(3.0, 3.9, [("b", 2, 3)], vis=2.0)
    b.settle("ack", 4.0, 4.1, [rb3])
    (rc,) = b.receive(5.0, 5.1, [("c", 3, 1)])
    b.settle("ack", 5.2, 5.3, [rc])
    return b


def test_clean_history_passes() -> None:
    rep = check(clean().h.ops)
    assert rep.ok, rep.failures()
    assert rep.attempted == 4 and rep.acked == 2 and rep.delivered == 3
    assert rep.recovered == ["c"]
    assert rep.lost == rep.unexpected == rep.duplicated == []
    assert rep.consumed == 3


def test_planted_loss() -> None:
    b = clean()
    b.send(6.0, 6.1, ["lost-one"])
    rep = check(b.h.ops)
    assert rep.lost == ["lost-one"]
    assert not rep.ok and "lost=1" in rep.failures()[0]


def test_unknown_send_never_delivered_is_not_lost() -> None:
    b = clean()
    b.send(6.0, 6.1, ["maybe"], outcome="unknown")
    assert check(b.h.ops).ok


def test_unexpected_message() -> None:
    b = clean()
    b.receive(6.0, 6.1, [("never-sent", 9, 1)])
    rep = check(b.h.ops)
    assert rep.unexpected == ["never-sent"]
    assert not rep.ok


def test_refused_send_delivered_is_flagged() -> None:
    b = clean()
    b.send(6.0, 6.1, ["refused"], outcome="failed")
    b.receive(7.0, 7.1, [("refused", 9, 1)])
    rep = check(b.h.ops)
    assert rep.failed_delivered == ["refused"] and not rep.ok


def test_planted_redelivery_after_ack() -> None:
    b = clean()
    # "a" was acked at 1.3; a receive starting at 10.0 gets it again.
    b.receive(10.0, 10.1, [("a", 1, 2)])
    rep = check(b.h.ops)
    assert len(rep.redelivered_after_ack) == 1
    assert "after its ack was confirmed" in rep.redelivered_after_ack[0]
    assert rep.duplicated == ["a"]
    assert not rep.ok


def test_lease_after_acked_lease_is_flagged_whatever_the_timing() -> None:
    b = Builder()
    b.send(0.0, 0.1, ["x"])
    (r1,) = b.receive(1.0, 1.1, [("x", 1, 1)], vis=0.5)
    # A receive that began *before* the ack confirmed still must not lease x again.
    b.receive(1.15, 2.5, [("x", 1, 2)], vis=0.5)
    b.settle("ack", 1.2, 2.0, [r1])
    rep = check(b.h.ops)
    assert len(rep.redelivered_after_ack) == 1 and "leased again" in rep.redelivered_after_ack[0]


def test_planted_lease_overlap() -> None:
    b = Builder()
    b.send(0.0, 0.1, ["x"])
    b.receive(1.0, 1.1, [("x", 1, 1)], vis=5.0)  # surely leased over [1.1, 6.0)
    b.receive(3.0, 3.1, [("x", 1, 2)], vis=5.0)  # leased again at 3.1: overlap
    rep = check(b.h.ops)
    assert len(rep.lease_overlaps) == 1 and not rep.ok
    assert "both leased it for 2.900s" in rep.lease_overlaps[0]


def test_lease_windows_are_conservative() -> None:
    b = Builder()
    b.send(0.0, 0.1, ["x", "y", "z"])
    # x's lease was stamped between 1.0 and 1.9: its deadline is only sure to be after 3.0, so
    # a receive that returns it at 3.0 may be legitimate.
    _, ry, _ = b.receive(1.0, 1.9, [("x", 1, 1), ("y", 2, 1), ("z", 3, 1)], vis=2.0)
    b.receive(2.9, 3.0, [("x", 1, 2)], vis=2.0)
    # y was nacked at 1.5 (its lease may have ended then).
    b.settle("nack", 1.5, 1.6, [ry])
    b.receive(1.7, 1.8, [("y", 2, 2)], vis=2.0)
    rep = check(b.h.ops)
    assert rep.lease_overlaps == [], rep.lease_overlaps
    assert rep.ok


def test_lease_fork() -> None:
    b = Builder()
    b.send(0.0, 0.1, ["x"])
    b.receive(1.0, 1.1, [("x", 1, 1)], vis=0.5)
    b.receive(2.0, 2.1, [("x", 1, 1)], vis=0.5)  # the same receive_count twice
    rep = check(b.h.ops)
    assert len(rep.lease_forks) == 1 and not rep.ok


def test_stored_twice_is_reported_not_failed() -> None:
    b = Builder()
    b.send(0.0, 0.1, ["x"], outcome="unknown")
    b.send(0.2, 0.3, ["x"])
    (r1,) = b.receive(1.0, 1.1, [("x", 1, 1)])
    (r2,) = b.receive(1.2, 1.3, [("x", 2, 1)])
    b.settle("ack", 1.4, 1.5, [r1, r2])
    rep = check(b.h.ops)
    assert rep.stored_twice == ["x"] and rep.duplicated == ["x"]
    assert rep.ok


def test_history_round_trips_through_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    b = Builder()
    b.h = History(path)
    b.send(0.0, 0.1, ["x"])
    b.receive(1.0, 1.1, [("x", 1, 1)])
    b.h.close()
    ops = load_jsonl(path)
    assert ops == b.h.ops
    assert check(ops).ok


def status(commit: int, applied: int, last: int) -> dict[str, object]:
    return {
        "groups": {"0": {"commit": 5, "applied": 5, "last_index": 5}}
        | {"1": {"commit": commit, "applied": applied, "last_index": last}},
        "placement": {"q": 1},
    }


def test_replica_check() -> None:
    same = {n: status(10, 10, 10) for n in (1, 2, 3)}
    assert check_replicas(same) == []
    lagging = dict(same) | {3: status(10, 9, 10)}
    assert any("applied 9 != commit 10" in p for p in check_replicas(lagging))
    diverged = dict(same) | {2: status(11, 11, 11)}
    assert any("differ by node" in p for p in check_replicas(diverged))


def test_planted_fifo_out_of_order_delivery() -> None:
    """A FIFO group's later message delivered while an earlier one was still stored: the
    earlier one comes back after it (the order check; more in test_apicheck.py)."""
    b = Builder()
    create = b.h.invoke("setup", "create", "q", 1, 0.0)
    b.h.complete(create, 0.0, "ok", '{"fifo": true}')
    for t, key in ((0.0, "a"), (0.2, "b")):
        op = b.h.invoke("p", "send", "q", 1, t)
        op.keys, op.groups = [key], ["g"]
        b.h.complete(op, t + 0.1, "ok")
    (rb,) = b.receive(1.0, 1.1, [("b", 2, 1)])  # b first, while a (seq 1) is stored
    b.settle("ack", 1.2, 1.3, [rb])
    (ra,) = b.receive(2.0, 2.1, [("a", 1, 1)])
    b.settle("ack", 2.2, 2.3, [ra])
    rep = check(b.h.ops)
    assert len(rep.surfaces.fifo_overtaken) == 1 and not rep.ok
    assert "returned seq 2 while a (seq 1) was still stored" in rep.surfaces.fifo_overtaken[0]
    assert any(f.startswith("fifo_overtaken=1") for f in rep.failures())
