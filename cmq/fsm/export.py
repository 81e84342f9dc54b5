"""The export read of a queue (`MachineReads.export_page`): its live messages in seq order,
visible, in flight and delayed alike, one page at a time, read without changing anything.

Pure: the records come through the `SegmentStore`; times are the caller's. A page reflects the
state after the last applied command. Across pages the export is a cursor over seqs bounded by
``upto`` (the queue's next seq when the export began): a page holds the messages live when it is
read, sent before the export began; a message deleted before its page is read is not in it, one
sent after the export began never is. A message `Tidy` copied forward past ``upto`` since the
export began is still found (by the seq it had before), possibly in two pages: the reader keeps
the first by id.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator

from pyroaring import BitMap

from cmq.export_values import ExportPage, LiveMessage
from cmq.fsm.cells import COUNT, LEASE
from cmq.fsm.queue import QueueState
from cmq.fsm.store import SegmentStore


def _seqs(q: QueueState, after: int, upto: int) -> Iterator[int]:
    """The live seqs of ``q`` above ``after`` belonging to an export bounded by ``upto``,
    ascending."""
    start = max(0, bisect_right(q.firsts, after) - 1)
    for seg in q.segments[start:]:
        if seg.first_seq >= upto:
            break
        lo = max(after + 1, seg.first_seq) - seg.first_seq
        hi = min(seg.count, upto - seg.first_seq)
        if lo >= hi:
            continue
        live = BitMap(range(lo, hi))
        live.difference_update(seg.deleted)
        for rel in live:
            yield seg.first_seq + rel
    copied = sorted(
        seq for seq, (_, olds) in q.moved.items() if seq >= upto and seq > after and olds[0] < upto
    )
    yield from copied


def live_message(q: QueueState, store: SegmentStore, seq: int, clock: int) -> LiveMessage:
    """The live message ``seq`` of ``q`` with its state at ``clock``."""
    seg = q.segment_of(seq)
    if seg is None:
        raise KeyError(seq)
    stored = store.read(q.key, seg.first_seq, seq)
    touched = q.touched
    slot = touched.slot_of.get(seq)
    count = 0 if slot is None else touched.get(slot, COUNT)
    leased = slot is not None and touched.get(slot, LEASE) != 0
    state, at = "visible", 0
    if seq in q.pending_dl:
        state = "in_flight"  # awaiting its move to the dead-letter queue
    elif seq not in q.ready:
        due = q.timer_at(seq)
        if due is not None and due > clock:
            state, at = ("in_flight" if leased else "delayed"), due
    moved = q.moved.get(seq)
    group = dedup = None
    if q.fifo is not None and seq in q.fifo.meta:
        group, dedup = q.fifo.meta[seq]
    elif q.fifo is None and q.ready.tenants is not None:
        group = q.ready.tenants.of.get(seq)  # its tenant (fair queues)
    return LiveMessage(
        id=stored.id,
        seq=seq,
        body=stored.body,
        binary=stored.binary,
        sent_at_ms=stored.sent_at_ms if moved is None else moved[0],
        attributes=stored.attributes,
        state=state,
        visible_at_ms=at,
        receive_count=count,
        group_id=group or None,
        dedup_id=dedup or None,
        ttl_deadline_ms=q.ttl.get(seq),
        priority=q.ready.level_of(seq),
    )


def export_page(
    q: QueueState,
    store: SegmentStore,
    *,
    after: int,
    upto: int,
    limit: int,
    max_bytes: int,
    now_ms: int,
) -> ExportPage:
    """Up to ``limit`` live messages of ``q`` with seq > ``after`` (and up to the one whose
    body takes the page past ``max_bytes``) in an export bounded by ``upto`` (0: the queue's
    next seq now, i.e. this is the first page)."""
    if upto <= 0:
        upto = q.next_seq
    clock = max(now_ms, q.clock)
    out: list[LiveMessage] = []
    size = 0
    last = None
    for seq in _seqs(q, after, upto):
        m = live_message(q, store, seq, clock)
        out.append(m)
        size += len(m.body)
        last = seq
        if len(out) >= limit or size >= max_bytes:
            break
    else:
        last = None
    return ExportPage(tuple(out), upto, last, clock)
