"""Pure checks of the API surfaces beyond plain send/receive (`check_surfaces`): FIFO order per
message group, delayed delivery, and dead-letter moves with the redrive back.

The history says what each queue is: the workload records every queue it creates as a
``create`` op whose ``detail`` holds the attributes (``fifo``, ``dead_letter_queue``,
``max_receive_count``). Messages are keys as in `tests.chaos.checker` (unique per run).

**FIFO order** (docs/sqs.md, "FIFO queues"; docs/api.md): a group is delivered in send order, and
while a message of a group is in flight nothing more of it is delivered. What a client can
observe of that, and what is checked (every rule holds whatever the clocks, except *blocked*,
which judges lease windows like the lease-overlap check):

* *send order*: a message A whose send was confirmed before the first send attempt of B (same
  group) began was stored first: ``seq(A) < seq(B)``. Nothing is promised between a send whose
  outcome is unknown and a later one (a held request may be applied after it) — the queue's
  order is then the order it stored them in, which ``seq`` is.
* *in order within a receive*: the messages of one group in one receive come in increasing seq.
* *no overtaking*: a receive that returns B leaves no earlier message A of the group behind:
  if A (``seq(A) < seq(B)``) is delivered by a receive that began after this one ended, A was
  still stored (deletion is final), so this receive had to return A first — unless it did.
* *blocked*: a receive that began and ended inside the sure lease window of another message
  of the group (`tests.chaos.checker` module doc; ended early by any ack or nack of that
  receipt) returned a message of that group while the group was blocked.

**Delays, scheduled times, times to live and retry back-off** (the scheduling checks, each
judging real time against a deadline): `tests.chaos.schedcheck`, run by `check_surfaces` over the
same deliveries (its ``backoff`` and ``ttl_keys`` are importable from here too).

**Dead letters** (docs/usage.md, docs/sqs.md, `cmq/redrive.py`): a message received
``max_receive_count`` times moves to the dead-letter queue instead of being delivered again;
moves copy then delete, and the copy carries a dedup id made of the message's id, so a
repeated move stores nothing twice.
A copy is a new message (its own seq); at the end of the run the workload reads the whole
dead-letter queue, then a move task redrives it back to the source. Per key, with ``S`` the
source messages seen, ``A`` those of them whose ack was confirmed and ``D`` the dead-letter
messages seen: ``|D| <= |S| - |A|`` (each source message moves at most once, and never after a
confirmed ack) and ``|S| <= 1 + |D|`` (each copy in the source comes from one dead-letter
message, at most once). A source delivery with ``receive_count > max_receive_count`` should
have moved instead. The keys of such queues are not counted as stored twice.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.chaos import rewindcheck
from tests.chaos.history import Op
from tests.chaos.schedcheck import backoff, check_backoff, check_delays, check_ttls, ttl_keys

__all__ = [
    "CLOCK_JUDGED",
    "QueueInfo",
    "Seen",
    "SurfaceReport",
    "backoff",
    "check_surfaces",
    "deliveries",
    "moved_keys",
    "queues_of",
    "ttl_keys",
]

CLOCK_JUDGED = (
    "lease_overlaps=",
    "fifo_blocked=",
    "early_deliveries=",
    "late_ttl_deliveries=",
    "early_retries=",
    *rewindcheck.CLOCK_JUDGED,
)
"""Failures that judge real time against lease or delay deadlines, which a clock beyond the
bound (a ``clock-jump``) may shift: reported, not failed, in runs with jumps."""


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as its ``create`` record describes it."""

    name: str
    fifo: bool = False
    dead_letter_queue: str | None = None
    max_receive_count: int = 0
    retry: tuple[float, float, float] | None = None
    """(initial, multiplier, max) of its ``retry`` back-off, in seconds."""


@dataclass(frozen=True, slots=True)
class Seen:
    """One delivery, with its receive's interval and its lease's sure end."""

    key: str
    queue: str
    seq: int
    receive_op: int
    position: int
    start: float
    end: float
    sure_until: float
    receive_count: int
    receipt: str


@dataclass(slots=True)
class SurfaceReport:
    """What `check_surfaces` found; lists hold examples for the failure message."""

    fifo_groups: int = 0
    fifo_deliveries: int = 0
    fifo_send_order: list[str] = field(default_factory=list)
    fifo_receive_order: list[str] = field(default_factory=list)
    fifo_overtaken: list[str] = field(default_factory=list)
    fifo_blocked: list[str] = field(default_factory=list)
    delayed_deliveries: int = 0
    early_deliveries: list[str] = field(default_factory=list)
    scheduled_deliveries: int = 0
    """Deliveries of messages sent with a ``deliver_at`` (also counted in delayed ones)."""
    ttl_deliveries: int = 0
    """Deliveries of messages sent with a time to live."""
    late_ttl_deliveries: list[str] = field(default_factory=list)
    expired_unseen: int = 0
    """Confirmed messages with a time to live that no receive returned (expired)."""
    retried: int = 0
    """Consecutive leases of one message judged by the back-off rule."""
    early_retries: list[str] = field(default_factory=list)
    dead_lettered: int = 0
    """Keys seen in a dead-letter queue."""
    redriven: int = 0
    """Keys seen again in their source after a dead-letter copy (moved back)."""
    dlq_accounting: list[str] = field(default_factory=list)
    past_max_receives: list[str] = field(default_factory=list)
    moves: dict[str, int] = field(default_factory=dict)
    """Move tasks by outcome."""
    delivered_by: dict[str, int] = field(default_factory=dict)
    """Deliveries per client (process name without its number): which surfaces took part."""

    FAILED: ClassVar[tuple[str, ...]] = (
        "fifo_send_order",
        "fifo_receive_order",
        "fifo_overtaken",
        "fifo_blocked",
        "early_deliveries",
        "late_ttl_deliveries",
        "early_retries",
        "dlq_accounting",
        "past_max_receives",
    )
    """The lists that fail a run."""

    def failures(self) -> list[str]:
        return rewindcheck.findings(self, self.FAILED)


def queues_of(ops: Sequence[Op]) -> dict[str, QueueInfo]:
    """The queues the history's ``create`` records describe."""
    out = {}
    for op in ops:
        if op.kind == "create" and op.outcome == "ok":
            attrs: dict[str, Any] = json.loads(op.detail or "{}")
            retry = attrs.get("retry")
            out[op.queue] = QueueInfo(
                op.queue,
                bool(attrs.get("fifo")),
                attrs.get("dead_letter_queue"),
                int(attrs.get("max_receive_count") or 0),
                None
                if not retry
                else (
                    float(retry["initial_seconds"]),
                    float(retry.get("multiplier", 2)),
                    float(retry.get("max_seconds", 300)),
                ),
            )
    return out


def deliveries(ops: Sequence[Op], tolerance: float) -> list[Seen]:
    """Every delivery of an ok receive, its lease's sure end shortened to the start of any ack
    or nack of its receipt (either may end it as early as it was sent) and by ``tolerance``."""
    settled: dict[str, float] = {}
    for op in ops:
        if op.kind in ("ack", "nack"):
            for r in op.receipts:
                settled[r] = min(settled.get(r, op.start), op.start)
    out = []
    for op in ops:
        if op.kind != "receive" or op.outcome != "ok":
            continue
        for i, d in enumerate(op.deliveries):
            until = min(op.start + op.visibility, settled.get(d.receipt, op.start + op.visibility))
            out.append(
                Seen(
                    d.key,
                    op.queue,
                    d.seq,
                    op.index,
                    i,
                    op.start,
                    op.end,
                    until - tolerance,
                    d.receive_count,
                    d.receipt,
                )
            )
    return out


def check_surfaces(
    ops: Sequence[Op],
    *,
    tolerance: float = 0.01,
    delay_tolerance: float = 0.5,
    ttl_slack: float = 1.0,
) -> SurfaceReport:
    """FIFO order, delays and scheduled times, times to live, retry back-off and dead-letter
    accounting over a complete history (module doc)."""
    rep = SurfaceReport()
    by: dict[str, int] = defaultdict(int)
    for op in ops:
        if op.kind == "receive" and op.outcome == "ok":
            by[op.process.rstrip("0123456789").rstrip("-")] += len(op.deliveries)
    rep.delivered_by = dict(sorted(by.items()))
    queues = queues_of(ops)
    seen = deliveries(ops, tolerance)
    _check_fifo(ops, queues, seen, rep)
    check_delays(ops, seen, rep, delay_tolerance)
    check_ttls(ops, seen, rep, ttl_slack)
    check_backoff(ops, queues, seen, rep, delay_tolerance)
    _check_dead_letters(ops, queues, seen, rep)
    return rep


def moved_keys(ops: Sequence[Op]) -> set[str]:
    """Keys sent to a queue with a dead-letter queue: their copies are accounted for by
    `check_surfaces`, not counted as stored twice."""
    queues = queues_of(ops)
    sources = {q for q, info in queues.items() if info.dead_letter_queue}
    return {k for op in ops if op.kind == "send" and op.queue in sources for k in op.keys}


# -- FIFO ------------------------------------------------------------------------------------------
def _check_fifo(
    ops: Sequence[Op], queues: dict[str, QueueInfo], seen: list[Seen], rep: SurfaceReport
) -> None:
    fifo = {q for q, info in queues.items() if info.fifo}
    group_of: dict[str, tuple[str, str]] = {}
    first_start: dict[str, float] = {}
    confirmed: dict[str, float] = {}
    for op in ops:
        if op.kind != "send" or op.queue not in fifo:
            continue
        for k, g in zip(op.keys, op.groups, strict=False):
            group_of[k] = (op.queue, g)
            first_start[k] = min(first_start.get(k, op.start), op.start)
            if op.outcome == "ok":
                confirmed[k] = min(confirmed.get(k, op.end), op.end)
    mine = [s for s in seen if s.queue in fifo and s.key in group_of]
    rep.fifo_deliveries = len(mine)
    seq_of: dict[str, int] = {}
    by_group: dict[tuple[str, str], list[Seen]] = defaultdict(list)
    for s in mine:
        seq_of.setdefault(s.key, s.seq)
        by_group[group_of[s.key]].append(s)
    rep.fifo_groups = len(by_group)
    for (queue, group), evs in sorted(by_group.items()):
        name = f"{queue}/{group}"
        keys = sorted({e.key for e in evs}, key=lambda k: seq_of[k])
        # Send order: a sweep over the sends in confirmation order.
        done = sorted((confirmed[k], k) for k in keys if k in confirmed)
        best: tuple[int, str] | None = None
        i = 0
        for k in sorted(keys, key=lambda k: first_start[k]):
            while i < len(done) and done[i][0] < first_start[k]:
                if best is None or seq_of[done[i][1]] > best[0]:
                    best = (seq_of[done[i][1]], done[i][1])
                i += 1
            if best is not None and best[0] > seq_of[k]:
                rep.fifo_send_order.append(
                    f"{name}: {k} (seq {seq_of[k]}) was first sent after {best[1]} "
                    f"(seq {best[0]}) was confirmed, yet stored before it"
                )
        by_receive: dict[int, list[Seen]] = defaultdict(list)
        last_start: dict[str, float] = {}
        for e in evs:
            by_receive[e.receive_op].append(e)
            last_start[e.key] = max(last_start.get(e.key, e.start), e.start)
        for r, got in sorted(by_receive.items()):
            got.sort(key=lambda e: e.position)
            seqs = [e.seq for e in got]
            if seqs != sorted(seqs) or len(set(seqs)) < len(seqs):
                rep.fifo_receive_order.append(
                    f"{name}: receive op {r} returned seqs {seqs} (keys {[e.key for e in got]})"
                )
            top, end, inside = max(seqs), got[0].end, {e.key for e in got}
            for k in keys:
                if seq_of[k] >= top:
                    break
                if k not in inside and last_start[k] > end:
                    rep.fifo_overtaken.append(
                        f"{name}: receive op {r} returned seq {top} while {k} (seq {seq_of[k]}) "
                        f"was still stored: delivered again at {last_start[k]:.3f} > {end:.3f}"
                    )
        _check_blocked(name, evs, by_receive, rep)


def _check_blocked(
    name: str, evs: list[Seen], by_receive: dict[int, list[Seen]], rep: SurfaceReport
) -> None:
    receives = sorted(
        (got[0].start, got[0].end, r, {e.key for e in got}) for r, got in by_receive.items()
    )
    starts = [x[0] for x in receives]
    for e in evs:
        for start, end, r, keys in receives[bisect_left(starts, e.end) :]:
            if start >= e.sure_until:
                break
            if r != e.receive_op and end <= e.sure_until and keys - {e.key}:
                rep.fifo_blocked.append(
                    f"{name}: receive op {r} ({start:.3f}-{end:.3f}) returned "
                    f"{sorted(keys - {e.key})[:3]} while {e.key} was leased by op "
                    f"{e.receive_op} until at least {e.sure_until:.3f}"
                )


# -- dead letters ----------------------------------------------------------------------------------
def _check_dead_letters(
    ops: Sequence[Op], queues: dict[str, QueueInfo], seen: list[Seen], rep: SurfaceReport
) -> None:
    moves: dict[str, int] = defaultdict(int)
    for op in ops:
        if op.kind == "move":
            moves[op.outcome] += 1
    rep.moves = dict(moves)
    # A source copy delivered by a receive that ended before any move task began cannot be a
    # redriven one: it is the key's original. A key whose original was never seen (every
    # lease of it in a receive whose answer was lost, as a kill or a pause makes) still had one.
    first_move = min((op.start for op in ops if op.kind == "move"), default=math.inf)
    acked = {
        r
        for op in ops
        if op.kind == "ack" and op.outcome == "ok"
        for r, ok in zip(op.receipts, op.entry_ok, strict=False)
        if ok
    }
    for source, info in sorted(queues.items()):
        dlq = info.dead_letter_queue
        if not dlq:
            continue
        src: dict[str, set[int]] = defaultdict(set)
        src_acked: dict[str, set[int]] = defaultdict(set)
        dead: dict[str, set[int]] = defaultdict(set)
        original_seen: set[str] = set()
        for s in seen:
            if s.queue == source:
                src[s.key].add(s.seq)
                if s.end < first_move:
                    original_seen.add(s.key)
                if s.receipt in acked:
                    src_acked[s.key].add(s.seq)
                if info.max_receive_count and s.receive_count > info.max_receive_count:
                    rep.past_max_receives.append(
                        f"{source}/{s.seq} ({s.key}): delivered by op {s.receive_op} with "
                        f"receive_count {s.receive_count} > {info.max_receive_count}"
                    )
            elif s.queue == dlq:
                dead[s.key].add(s.seq)
        rep.dead_lettered += len(dead)
        rep.redriven += sum(len(src[k]) > 1 for k in dead)
        for k in sorted(src.keys() | dead.keys()):
            n_src, n_acked, n_dead = len(src[k]), len(src_acked[k]), len(dead[k])
            unseen = 0 if k in original_seen else 1  # its original, if never delivered
            if n_dead > n_src + unseen - n_acked:
                rep.dlq_accounting.append(
                    f"{k}: {n_dead} copies in {dlq} but {n_src} messages in {source} of which "
                    f"{n_acked} acked (moved twice, or moved after a confirmed ack)"
                )
            if n_src > 1 + n_dead:
                rep.dlq_accounting.append(
                    f"{k}: {n_src} messages in {source} but {n_dead} copies seen in {dlq} "
                    f"(a redrive stored twice)"
                )
