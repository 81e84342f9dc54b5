"""Pure checks of rewinds (`check_rewinds`): what may, what must and what must not come back
after an ack on a queue that keeps acknowledged messages (docs/api.md, "Rewind by time").

**Identity.** A rewind (`cmq.fsm.rewind`) appends each acknowledged message it brings back as a
*new message*: the same id, body and send time, a **new seq**, its receive count restarted (its
first lease has ``receive_count`` 1). The history names a message by its key (the body), so a
rewound copy is the same key under a new seq; the acknowledged record itself never comes back
(its seq stays deleted: the per-seq rule "redelivered after ack" of `tests.chaos.checker` still
holds for it, and for each copy's own seq). A copy is never rewound again (only the acked
original is a candidate), and a message whose copy is still live is not copied again, so each
rewind brings a message back at most once. A copy may itself be copied forward by `Tidy`
(another seq, its receive count kept), so copies are counted by their *fresh* deliveries
(``receive_count`` 1), as the queue simulator counts them (`tests/queuesim/rewind.py`).

The rules are the queue simulator's three, on a real history (times are the runner's; a rewind
is applied between its op's start and end, an unknown one at any later time; an ack between
its attempt's start and end, and an ack entry answered not ok may have applied too: the router
repeats an ack attempt of unknown outcome, and the repeat calls the deleted entry stale):

* **once** (``rewind_extra``): a key's fresh deliveries that ended after its first ack attempt
  began (a copy is leased after the original's ack applied) are at most the rewinds that could
  have applied after that ack (ok ones that ended after it, and every unknown one). This judges
  no clock: a rewind that answered before the ack was sent cannot have copied the message.
* **nothing else** (``rewind_outside``): they are also at most the rewinds whose ``since``
  could cover the key (its send's stamp may be at or after ``since``: the latest time its send
  can have been stamped, the end of its first confirmed attempt, plus ``tolerance`` for the
  stamping leader's clock; a key never confirmed may be stamped any time); and a delivery that
  began after the key's ack was confirmed, at a seq not seen before that ack, needs such a
  rewind. The send times are on the runner's wall clock (``Op.wall``), as ``since`` is.
* **each one** (``rewind_missed``): after a rewind answered ok, every key whose ack was
  confirmed before the rewind began and whose first send attempt began at least ``tolerance``
  after ``since`` must be delivered again: some delivery of it at a seq not confirmed acked
  before the rewind began, by a receive that ended after the rewind began or after the key's
  first ack attempt (a copy from an earlier rewind still live then counts). A rewind of unknown
  outcome allows copies but requires none.

Also: the copies seen against the counts the cluster answered (``rewind_count``, judged only
when every rewind of the queue answered) are reported, not failed: a rewind whose first attempt
had an unknown outcome inside the cluster is proposed again by the router, and its answer
counts the last application only (chaos seed 120 saw 170 copies against 126 answered, every
copy within the rules above). And two fresh deliveries of a key at two seqs
before any ack of it are a send stored twice (``stored_twice``: the main checker leaves a
rewound queue's keys to this module, since a copy is the same key under another seq).
``rewind_outside`` and ``rewind_missed`` compare send stamps with ``since`` through the clocks:
reported, not failed, in runs with clock jumps (`CLOCK_JUDGED`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.chaos.history import Op

CLOCK_JUDGED = ("rewind_outside=", "rewind_missed=")
"""Failures that compare send stamps with a rewind's ``since`` through the clocks."""


def findings(
    report: object, names: Iterable[str], n: int = 3, *, ordered: bool = False
) -> list[str]:
    """``<name>=<count> e.g. <its first n>`` for each non-empty list ``name`` of ``report`` (the
    first n in sorted order when ``ordered``): how the chaos reports (`tests.chaos.checker.Report`
    and its parts) list what they found."""
    out = []
    for name in names:
        items: list[str] = getattr(report, name)
        if items:
            out.append(f"{name}={len(items)} e.g. {(sorted(items) if ordered else items)[:n]}")
    return out


@dataclass(slots=True)
class RewindReport:
    """What `check_rewinds` found, in the shape of `tests.chaos.checker.Report`: figures, lists
    of examples, `failures` (the rules broken: the run fails), `notes` (reported, not failed)
    and `ok`."""

    FAILED: ClassVar[tuple[str, ...]] = ("rewind_extra", "rewind_outside", "rewind_missed")
    """The lists that fail a run."""
    NOTED: ClassVar[tuple[str, ...]] = ("rewind_count",)
    """The lists reported, not failed (``stored_twice`` is the main checker's to report)."""

    rewinds: dict[str, int] = field(default_factory=dict)
    """Rewind requests by outcome."""
    reported: int = 0
    """The messages the ok rewinds said they made deliverable again, summed."""
    judged: int = 0
    """Keys of rewound queues acked at least once (the keys the rules judge)."""
    allowed: int = 0
    """Copies the rules allowed: per key, the rewinds that could cover it after its ack."""
    copies: int = 0
    """Copies seen: fresh deliveries after an ack (each one a rewound copy)."""
    required: int = 0
    """(rewind, key) pairs that had to bring the key back (``rewind_missed`` judged them)."""
    rewind_extra: list[str] = field(default_factory=list)
    rewind_outside: list[str] = field(default_factory=list)
    rewind_missed: list[str] = field(default_factory=list)
    rewind_count: list[str] = field(default_factory=list)
    stored_twice: list[str] = field(default_factory=list)
    """Keys stored under two seqs before any ack (reported by the main checker)."""

    def failures(self) -> list[str]:
        """The rules broken, each with a count and a few examples."""
        return findings(self, self.FAILED)

    def notes(self) -> list[str]:
        """What is reported, not failed, each with a count and a few examples."""
        return findings(self, self.NOTED)

    @property
    def ok(self) -> bool:
        return not self.failures()


@dataclass(frozen=True, slots=True)
class _Rewind:
    index: int
    queue: str
    since: float
    """Wall clock (epoch seconds)."""
    start: float
    end: float
    """When it was applied at the latest (infinite: unknown outcome)."""
    ok: bool
    count: int


@dataclass(frozen=True, slots=True)
class _Seen:
    seq: int
    receive_count: int
    receipt: str
    start: float
    end: float
    op: int


def rewound_queues(ops: Sequence[Op]) -> set[str]:
    """Queues that keep acknowledged messages (their ``create`` record) or were rewound."""
    out = {op.queue for op in ops if op.kind == "rewind"}
    for op in ops:
        if op.kind == "create" and op.outcome == "ok":
            attrs: dict[str, Any] = json.loads(op.detail or "{}")
            if attrs.get("retain_acked_seconds"):
                out.add(op.queue)
    return out


def rewound_keys(ops: Sequence[Op]) -> set[str]:
    """Keys sent to a rewound queue: `check_rewinds` accounts for their copies."""
    queues = rewound_queues(ops)
    return {k for op in ops if op.kind == "send" and op.queue in queues for k in op.keys}


@dataclass(slots=True)
class _Facts:
    """What the history says about the rewound queues, indexed for the rules."""

    tol: float
    rewinds: dict[str, list[_Rewind]] = field(default_factory=lambda: defaultdict(list))
    queue_of: dict[str, str] = field(default_factory=dict)
    sent_lo: dict[str, float] = field(default_factory=dict)
    """Key -> its first send attempt's start (wall clock)."""
    sent_hi: dict[str, float] = field(default_factory=dict)
    """Key -> the end of its first confirmed send attempt (wall clock): its latest stamp."""
    seen: dict[str, list[_Seen]] = field(default_factory=lambda: defaultdict(list))
    ack_lo: dict[str, float] = field(default_factory=dict)
    """Receipt -> the start of its earliest ack attempt that may have applied."""
    ack_sure: dict[str, float] = field(default_factory=dict)
    """Receipt -> the end of its earliest confirmed ack."""

    def first(self, k: str, at: dict[str, float]) -> float | None:
        """The earliest time in ``at`` (`ack_lo` or `ack_sure`) of any receipt of ``k``."""
        times = [at[e.receipt] for e in self.seen.get(k, []) if e.receipt in at]
        return min(times) if times else None

    def fresh_after(self, k: str, t: float | None) -> set[int]:
        """Seqs of ``k`` with a first lease (receive count 1) by a receive that ended after
        ``t`` (none when ``t`` is None)."""
        if t is None:
            return set()
        return {e.seq for e in self.seen.get(k, []) if e.receive_count == 1 and e.end > t}


def _facts(ops: Sequence[Op], queues: set[str], tol: float, rep: RewindReport) -> _Facts:
    f = _Facts(tol)
    outcomes: dict[str, int] = defaultdict(int)
    for op in ops:
        if op.queue not in queues:
            continue
        if op.kind == "rewind":
            outcomes[op.outcome] += 1
            if op.outcome == "failed":
                continue
            ok = op.outcome == "ok"
            rep.reported += max(op.rewound, 0) if ok else 0
            end = op.end if ok else math.inf
            f.rewinds[op.queue].append(
                _Rewind(op.index, op.queue, op.since, op.start, end, ok, op.rewound)
            )
        elif op.kind == "send":
            for k in op.keys:
                f.queue_of[k] = op.queue
                f.sent_lo[k] = min(f.sent_lo.get(k, op.wall), op.wall)
                if op.outcome == "ok":
                    hi = op.wall + (op.end - op.start)
                    f.sent_hi[k] = min(f.sent_hi.get(k, hi), hi)
        elif op.kind == "receive" and op.outcome == "ok":
            for d in op.deliveries:
                f.seen[d.key].append(
                    _Seen(d.seq, d.receive_count, d.receipt, op.start, op.end, op.index)
                )
        elif op.kind == "ack" and op.outcome != "failed":
            # An entry answered not ok may still have applied: the router repeats an ack
            # whose attempt had an unknown outcome, and the repeat reports the entry it
            # deleted as stale (`cmq.routing.rpc.Call.retry_unknown`).
            for i, r in enumerate(op.receipts):
                f.ack_lo[r] = min(f.ack_lo.get(r, op.start), op.start)
                if op.outcome == "ok" and i < len(op.entry_ok) and op.entry_ok[i]:
                    f.ack_sure[r] = min(f.ack_sure.get(r, op.end), op.end)
    rep.rewinds = dict(sorted(outcomes.items()))
    return f


def check_rewinds(ops: Sequence[Op], *, tolerance: float = 0.5) -> RewindReport:
    """The rewind rules over a complete history (module doc). ``tolerance``: how far a send's
    stamp may be from the runner's wall clock (the clock bound)."""
    rep = RewindReport()
    queues = rewound_queues(ops)
    if not queues:
        return rep
    f = _facts(ops, queues, tolerance, rep)
    for k in sorted(f.seen.keys() | f.queue_of.keys()):
        _judge_key(f, k, rep)
    for queue, recs in sorted(f.rewinds.items()):
        _judge_required(f, queue, recs, rep)
        if recs and all(r.ok and r.count >= 0 for r in recs):
            total = sum(r.count for r in recs)
            mine = sum(
                len(f.fresh_after(k, f.first(k, f.ack_lo)))
                for k, q in f.queue_of.items()
                if q == queue
            )
            if mine > total:
                rep.rewind_count.append(
                    f"{queue}: {mine} rewound copies delivered, but its rewinds said {total}"
                )
    return rep


def _judge_key(f: _Facts, k: str, rep: RewindReport) -> None:
    """The rules *once* and *nothing else* for key ``k``, and its sends stored twice."""
    evs = f.seen.get(k, [])
    first_ack = f.first(k, f.ack_lo)
    before = {
        e.seq for e in evs if e.receive_count == 1 and (first_ack is None or e.end <= first_ack)
    }
    if len(before) > 1:
        rep.stored_twice.append(k)
    queue = f.queue_of.get(k)
    if first_ack is None or queue is None:
        return
    rep.judged += 1
    after = [r for r in f.rewinds.get(queue, []) if r.end >= first_ack]
    hi = f.sent_hi.get(k, math.inf)
    cover = [r for r in after if r.since <= hi + f.tol]
    fresh = f.fresh_after(k, first_ack)
    rep.allowed += len(cover)
    rep.copies += len(fresh)
    if len(fresh) > len(after):
        rep.rewind_extra.append(
            f"{queue}: {k} came back {len(fresh)} times (seqs {sorted(fresh)}) after its ack, "
            f"but only {len(after)} rewinds could have applied after it"
        )
    elif len(fresh) > len(cover):
        rep.rewind_outside.append(
            f"{queue}: {k} came back {len(fresh)} times (seqs {sorted(fresh)}) after its ack, "
            f"but only {len(cover)} rewinds reach back to its send"
        )
    sure = f.first(k, f.ack_sure)
    if sure is None or cover:
        return
    known = {e.seq for e in evs if e.end <= sure}
    for e in evs:
        if e.start > sure and e.seq not in known:
            rep.rewind_outside.append(
                f"{queue}: {k} delivered at seq {e.seq} by receive op {e.op} after its ack was "
                f"confirmed, and no rewind reaches back to its send"
            )
            break


def _judge_required(f: _Facts, queue: str, recs: list[_Rewind], rep: RewindReport) -> None:
    """The rule *each one* for the ok rewinds of ``queue``."""
    keys = [k for k, q in sorted(f.queue_of.items()) if q == queue and k in f.seen]
    for r in recs:
        if not r.ok:
            continue
        for k in keys:
            sure = f.first(k, f.ack_sure)
            if sure is None or sure >= r.start or f.sent_lo[k] < r.since + f.tol:
                continue
            rep.required += 1
            first_ack = f.first(k, f.ack_lo)
            assert first_ack is not None
            evs = f.seen[k]
            done = {
                e.seq for e in evs if e.receipt in f.ack_sure and f.ack_sure[e.receipt] < r.start
            }
            if not any(e.seq not in done and (e.end > r.start or e.end > first_ack) for e in evs):
                rep.rewind_missed.append(
                    f"{queue}: {k} (acked before rewind op {r.index}, sent after its since) "
                    f"was not delivered again"
                )
