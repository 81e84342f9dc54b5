"""A queue's figures (pure), read from a `QueueState` between applies: `queue_stats`, the exact
counts the API's queue status reports; `QueueGauges`, what `/metrics` exports per queue
(`cmq.node.queue_metrics`), in one pass; `segment_figures`, its segments by state and bytes.

`queue_gauges` costs O(invisible messages + segments + messages copied forward) like
`queue_stats`, and reads no segment file: the send times it needs are in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmq.fsm import timedwork
from cmq.fsm.cells import LEASE, VIS, WIDTH
from cmq.fsm.queue import QueueState
from cmq.model import QueueStats, SegmentCounts

__all__ = ["QueueGauges", "queue_gauges", "queue_stats", "segment_figures"]


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """One queue's figures at a time ``now_ms`` (see `queue_gauges`). The ``*_total``
    counters ``sent``, ``acked``, ``expired`` and ``dead_lettered`` are replicated state;
    ``received`` and ``nacked`` are counted as commands apply on this replica (they start at 0
    when the replica's state is built: at its creation or a restore)."""

    name: str
    visible: int
    in_flight: int
    """Leased and not yet visible again, or waiting to be moved to the dead-letter queue."""
    delayed: int
    """Invisible and not leased: delayed sends, nacks with a delay, expired leases backing off."""
    oldest_visible_ms: int
    """Age of the oldest visible message (from its send time); 0 when none is visible."""
    bytes: int
    """Bytes of the queue's segments that are not released (records of deleted messages
    included until their segment is released)."""
    fifo_groups_blocked: int
    """FIFO groups with a message in flight (0 for a standard queue)."""
    sent_total: int
    received_total: int
    acked_total: int
    nacked_total: int
    expired_total: int
    dead_lettered_total: int

    @property
    def depth(self) -> int:
        """Messages held: visible + in flight + delayed."""
        return self.visible + self.in_flight + self.delayed


def _sent_at(q: QueueState, seq: int) -> int | None:
    """The send time recorded in ``seq``'s segment slot (for a copy forward: the slot's, not
    the message's real send time, which is in ``q.moved``)."""
    seg = q.segment_of(seq)
    return None if seg is None else seg.sent_at[seq - seg.first_seq]


def queue_gauges(q: QueueState, now_ms: int) -> QueueGauges:
    """``q``'s figures at the queue's time at ``now_ms`` (`QueueState.time_at`: a read, nothing
    moves). Visible, in flight and delayed count as `queue_stats` counts them.

    The oldest visible message: send times are non-decreasing in seq but for messages copied
    forward (`Tidy`), whose real send time is older than their slot's; so it is the earliest of
    the lowest visible seq's slot time and the real send times of the visible copies.

    Cached per queue (`QueueState.gauges`, dropped by every command that touches the queue):
    until a command or the next timer (a lease or delay running out), only the age moves, so
    an idle queue costs a lookup per scrape."""
    clock = q.time_at(now_ms)
    cached = q.gauges
    if cached is not None and clock < cached[0]:
        _, oldest, f = cached
        age = 0 if oldest is None else max(0, clock - oldest)
        return QueueGauges(q.name, f[0], f[1], f[2], age, *f[3:])
    in_flight = delayed = 0
    next_at = _FOREVER
    due: list[int] = []
    fifo = q.fifo
    blocked: set[str] = set()
    if q.timers:
        due, delayed, first = q.untouched_timers(clock)
        if first is not None:
            next_at = first
    if q.touched:
        cells, slot_of = q.touched.cells, q.touched.slot_of
        meta = None if fifo is None else fifo.meta
        for seq, at in q.touched_timers():
            if at <= clock:
                due.append(seq)
                continue
            next_at = min(next_at, at)
            slot = slot_of.get(seq)
            if slot is not None and cells[slot * WIDTH + LEASE] != 0:
                # Leased: in flight until its deadline, then delayed while it backs off (the
                # queue's retry policy; its timer is the deadline plus the back-off). Its FIFO
                # group stays blocked either way.
                deadline = cells[slot * WIDTH + VIS]
                if deadline > clock:
                    in_flight += 1
                    next_at = min(next_at, deadline)
                else:
                    delayed += 1
                if meta is not None and (entry := meta.get(seq)) is not None:
                    blocked.add(entry[0])
            else:
                delayed += 1
    pending_dl = q.pending_dl
    if fifo is not None and pending_dl:
        for seq in pending_dl:
            if (entry := fifo.meta.get(seq)) is not None:
                blocked.add(entry[0])
    ready = q.ready
    visible = len(ready) + len(due)
    oldest = None
    if visible:
        first = ready.min() if ready else None
        if due and (first is None or min(due) < first):
            first = min(due)
        oldest = None if first is None else _sent_at(q, first)
        if q.moved:
            due_set = set(due)
            for seq, (sent, _) in q.moved.items():
                if (seq in ready or seq in due_set) and (oldest is None or sent < oldest):
                    oldest = sent
    segments = q.segments
    size = segments[-1].size if len(segments) == 1 else _unreleased_bytes(q)
    fields = (
        visible,
        in_flight + len(pending_dl),
        delayed,
        size,
        len(blocked),
        q.sent_total,
        q.received_total,
        q.acked_total,
        q.nacked_total,
        q.expired_total,
        q.dead_lettered_total,
    )
    q.gauges = (next_at, oldest, fields)
    age = 0 if oldest is None else max(0, clock - oldest)
    return QueueGauges(q.name, fields[0], fields[1], fields[2], age, *fields[3:])


_FOREVER = 1 << 62


def _unreleased_bytes(q: QueueState) -> int:
    return sum(seg.size for seg in q.segments if not seg.released)


def queue_stats(q: QueueState, now_ms: int, pending: tuple[int, int] = (0, 0)) -> QueueStats:
    """Exact counts at the queue's time at ``now_ms`` (`QueueState.time_at`). ``in_flight`` includes
    messages waiting to be moved to the dead-letter queue; ``delayed`` = invisible without a
    lease (delayed sends, nacks with a delay). O(invisible messages + segments). ``pending``:
    (count, bytes) of this replica's segments of the queue whose files await removal."""
    clock = q.time_at(now_ms)
    due_untouched, delayed, _ = q.untouched_timers(clock)
    due, in_flight = len(due_untouched), 0
    due_touched: list[int] = []
    touched = q.touched
    for seq, at in q.touched_timers():
        if at <= clock:
            due += 1
            due_touched.append(seq)
            continue
        slot = touched.slot_of.get(seq)
        if slot is not None and touched.get(slot, LEASE) != 0 and touched.get(slot, VIS) > clock:
            in_flight += 1
        else:  # delayed sends, nacks with a delay, expired leases backing off
            delayed += 1
    oldest_sent = timedwork.oldest_sent(q)
    oldest = 0 if oldest_sent is None else max(0, clock - oldest_sent)
    segments, disk, unarchived = segment_figures(q, now_ms, pending)
    levels = q.attributes.priorities
    by_level = q.ready.by_level(levels, (*due_untouched, *due_touched)) if levels > 1 else ()
    return QueueStats(
        visible=len(q.ready) + due,
        in_flight=in_flight + len(q.pending_dl),
        delayed=delayed,
        sent_total=q.sent_total,
        acked_total=q.acked_total,
        dead_lettered_total=q.dead_lettered_total,
        expired_total=q.expired_total,
        oldest_age_ms=oldest,
        segments=segments,
        disk_bytes=disk,
        oldest_unarchived_ms=unarchived,
        visible_by_priority=by_level,
        tenants=0 if q.ready.tenants is None else len(q.ready.tenants.active),
    )


def segment_figures(
    q: QueueState, now_ms: int, pending: tuple[int, int] = (0, 0)
) -> tuple[SegmentCounts, int, int]:
    """This replica's segments of the queue by state, their file bytes and the archive's
    backlog (ms; see `QueueStats`) at ``now_ms``; ``pending``: (count, bytes) of its
    segments whose files await removal. O(segments)."""
    by_state = {"active": 0, "sealed": 0, "released": 0, "archived_pending": 0}
    disk = pending[1]
    for seg in q.segments:
        by_state[seg.state()] += 1
        disk += seg.size
    # The archive's backlog: the oldest released segment (first send time) not archived.
    held = min(
        (seg.sent_at[0] for seg in q.segments if seg.released and not seg.archived),
        default=None,
    )
    counts = SegmentCounts(
        by_state["active"],
        by_state["sealed"],
        by_state["released"],
        pending[0] + by_state["archived_pending"],
    )
    return counts, disk, 0 if held is None else max(0, q.time_at(now_ms) - held)
