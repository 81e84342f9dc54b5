"""A queue's monitoring figures in one pass (pure): `QueueGauges`, what `/metrics` exports per
queue (`cmq.node.queue_metrics`), read from a `QueueState` between applies.

`queue_gauges` costs O(invisible messages + segments + messages copied forward) like
`QueueState.stats`, and reads no segment file: the send times it needs are in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmq.fsm.queue import LEASE, QueueState

__all__ = ["QueueGauges", "queue_gauges"]


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
    """Invisible without a lease (delayed sends, nacks with a delay)."""
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
    moves). Visible, in flight and delayed count as `QueueState.stats` counts them.

    The oldest visible message: send times are non-decreasing in seq but for messages copied
    forward (`Tidy`), whose real send time is older than their slot's; so it is the earliest of
    the lowest visible seq's slot time and the real send times of the visible copies."""
    clock = q.time_at(now_ms)
    in_flight = delayed = 0
    due_min: int | None = None
    due: set[int] = set()
    touched = q.touched
    slot_of = touched.slot_of
    fifo = q.fifo
    blocked: set[str] = set()
    for seq, at in q.timer_of.items():
        if at <= clock:
            due.add(seq)
            if due_min is None or seq < due_min:
                due_min = seq
            continue
        slot = slot_of.get(seq)
        if slot is not None and touched.get(slot, LEASE) != 0:
            in_flight += 1
            if fifo is not None and (meta := fifo.meta.get(seq)) is not None:
                blocked.add(meta[0])
        else:
            delayed += 1
    if fifo is not None:
        for seq in q.pending_dl:
            if (meta := fifo.meta.get(seq)) is not None:
                blocked.add(meta[0])
    ready = q.ready
    first = ready.min() if ready else None
    if due_min is not None and (first is None or due_min < first):
        first = due_min
    oldest = None if first is None else _sent_at(q, first)
    for seq, (sent, _) in q.moved.items():
        if (seq in ready or seq in due) and (oldest is None or sent < oldest):
            oldest = sent
    return QueueGauges(
        name=q.name,
        visible=len(ready) + len(due),
        in_flight=in_flight + len(q.pending_dl),
        delayed=delayed,
        oldest_visible_ms=0 if oldest is None else max(0, clock - oldest),
        bytes=sum(seg.size for seg in q.segments if not seg.released),
        fifo_groups_blocked=len(blocked),
        sent_total=q.sent_total,
        received_total=q.received_total,
        acked_total=q.acked_total,
        nacked_total=q.nacked_total,
        expired_total=q.expired_total,
        dead_lettered_total=q.dead_lettered_total,
    )
