"""The timed work due on a queue (pure: no I/O, no clocks): what its group's leader asks between
applies to decide which housekeeping commands to propose (`due`: an `Expire`, a `DeadLetter`, a
`Tidy`) and the predicates that is computed from, as free functions over a
`cmq.fsm.queue.QueueState` that change nothing of it but its ``start_floor`` cache: retention
(`retention_start`, `min_start`, `expirable`), the segments' lives (`seal_due`, `sparse`,
`archive_done`, `retaining`, `settle_due`), and reads of the same kind: when a message becomes
visible (`has_visible`, `next_visible_at`: the long polls' hints) and the oldest message's send
time (`oldest_sent`, for `cmq.fsm.gauges`). The commands that do the work use the same
predicates (`cmq.fsm.messages`, `cmq.fsm.lifecycle`, `cmq.fsm.writer`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cmq.fsm.cells import Segment
from cmq.fsm.queue import QueueState

__all__ = [
    "COMPACT_MAX_LIVE",
    "COMPACT_RATIO",
    "Due",
    "archive_done",
    "due",
    "expirable",
    "has_visible",
    "min_start",
    "next_visible_at",
    "oldest_sent",
    "retaining",
    "retention_start",
    "seal_due",
    "settle_due",
    "sparse",
]

COMPACT_MAX_LIVE = 64
COMPACT_RATIO = 8
"""A sealed segment is *sparse* (its live messages are copied forward by `Tidy`) when it holds
at most `COMPACT_MAX_LIVE` live messages and at most 1/`COMPACT_RATIO` of its records."""


@dataclass(frozen=True, slots=True)
class Due:
    """The timed work due on one queue at ``now_ms``, for its group's leader to propose."""

    queue: str
    now_ms: int
    expire: bool
    """An `Expire` at ``now_ms`` would delete something (retention)."""
    dead_letters: tuple[int, ...]
    """Seqs marked for the dead-letter queue (ascending, at most the asked limit); empty when
    the queue has no dead-letter queue."""
    dead_letter_queue: str
    tidy: bool = False
    """A `Tidy` at ``now_ms`` would seal the active segment or copy messages forward."""


def oldest_sent(q: QueueState) -> int | None:
    """The send time of the oldest live message (copies forward included)."""
    first = q.first_live()
    oldest = None if first is None else first[0].sent_at[first[1]]
    for sent, _ in q.moved.values():
        if oldest is None or sent < oldest:
            oldest = sent
    return oldest


def has_visible(q: QueueState, now_ms: int) -> bool:
    """Whether a `Lease` at ``now_ms`` would find a message."""
    if q.ready.all:
        return True
    at = q.timers.earliest(q.timer_valid)
    return at is not None and at <= q.time_at(now_ms)


def next_visible_at(q: QueueState) -> int | None:
    """The earliest time an invisible message (delayed, leased, nacked) becomes visible."""
    return q.timers.earliest(q.timer_valid)


def retention_start(q: QueueState, seg: Segment, rel: int) -> int:
    """When the message of record ``rel`` of ``seg`` first became visible: retention
    counts from then (a delayed message never expires before it was deliverable). Its
    send time plus its send's delay; for a message copied forward, its original's."""
    vf = seg.visible_from
    if vf is not None:
        return vf[rel]
    if rel in seg.copies:
        return q.moved[seg.first_seq + rel][0]
    return seg.sent_at[rel]


def min_start(q: QueueState) -> int | None:
    """The least `retention_start` of a live message (None: none). Scans the live
    messages of the segments with delayed records; the others' first live record."""
    best: int | None = None
    for seg in q.segments:
        if seg.full():
            continue
        if seg.visible_from is None:
            live = seg.deleted.flip(0, seg.count)
            first = live.min()
            at = retention_start(q, seg, first)
            for rel in seg.copies & live:
                at = min(at, retention_start(q, seg, rel))
        elif not seg.deleted:
            at = min(seg.visible_from)  # in C: nothing of the segment is deleted yet
        else:
            vf = seg.visible_from
            at = min(vf[rel] for rel in seg.deleted.flip(0, seg.count))
        best = at if best is None else min(best, at)
    return best


def expirable(q: QueueState, now_ms: int) -> bool:
    """Whether an `Expire` at ``now_ms`` would delete something: a live message whose
    `retention_start` is at least the retention before the queue's time."""
    cutoff = q.time_at(now_ms) - q.attributes.message_retention_seconds * 1000
    floor = q.start_floor
    if floor is None:
        floor = q.start_floor = min_start(q)
    if floor is None or floor > cutoff:
        deadline = q.next_ttl()
        return deadline is not None and deadline <= q.time_at(now_ms)
    exact = q.start_floor = min_start(q)
    if exact is not None and exact <= cutoff:
        return True
    deadline = q.next_ttl()
    return deadline is not None and deadline <= q.time_at(now_ms)


def retaining(q: QueueState, seg: Segment, clock: int | None = None) -> bool:
    """Whether the queue's ``retain_acked_seconds`` still keeps ``seg`` at queue time
    ``clock`` (default: now): a rewind may want its records while its newest record's
    send-time entry is within that retention of the time."""
    keep = q.attributes.retain_acked_seconds * 1000
    at = q.clock if clock is None else clock
    return bool(keep and seg.count and seg.sent_at[-1] + keep > at)


def archive_done(q: QueueState, seg: Segment) -> bool:
    """Whether the archive is done with the released ``seg``: archived, or nothing of it
    to archive (no ``archive``, or only copies)."""
    return seg.archived or not q.attributes.archive or seg.archivable() == 0


def settle_due(q: QueueState, now_ms: int) -> bool:
    """Whether a `Tidy` at ``now_ms`` would forget a released segment whose archive and
    retention are both done (`cmq.fsm.writer.SegmentWriter.settle`)."""
    clock = q.time_at(now_ms)
    return any(
        seg.released and archive_done(q, seg) and not retaining(q, seg, clock) for seg in q.segments
    )


def due(q: QueueState, now_ms: int, dead_letter_limit: int) -> Due | None:
    """What is due on ``q`` at ``now_ms`` (None: nothing)."""
    expire = expirable(q, now_ms)
    dlq = q.attributes.dead_letter_queue
    dead: tuple[int, ...] = ()
    if dlq and q.pending_dl:
        dead = tuple(q.pending_dl_seqs()[:dead_letter_limit])
    tidy = seal_due(q, now_ms) or any(True for _ in sparse(q)) or settle_due(q, now_ms)
    if not expire and not dead and not tidy:
        return None
    return Due(q.name, now_ms, expire, dead, dlq or "", tidy)


def seal_due(q: QueueState, now_ms: int) -> bool:
    """Whether the active segment is older than the queue's segment age at ``now_ms``."""
    if not q.segments or q.segments[-1].sealed:
        return False
    seg = q.segments[-1]
    return q.time_at(now_ms) - seg.created_ms >= q.segment_age_ms


def sparse(q: QueueState) -> Iterator[Segment]:
    """The sealed segments whose few live messages `Tidy` copies forward, oldest first.
    Never on a FIFO queue: a copy gets a new seq, which would reorder its group."""
    if q.fifo is not None:
        return
    for seg in q.segments:
        if not seg.sealed or seg.released:
            continue
        live = seg.count - len(seg.deleted)
        if 0 < live <= COMPACT_MAX_LIVE and live * COMPACT_RATIO <= seg.count:
            yield seg
