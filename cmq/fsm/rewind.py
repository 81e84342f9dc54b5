"""`Rewind`: acknowledged messages made deliverable once more (pure apply logic).

What a rewind to time T does, decided here on every replica alike:

* **Which messages.** Every message of the queue that was *acknowledged* and whose send time is
  at or after T and within the queue's ``retain_acked_seconds`` of the queue's time (so the
  record is still stored: `cmq.fsm.writer.SegmentWriter.settle` keeps a segment that long).
  Messages that expired, went to the dead-letter queue or were purged are not rewound (a time
  to live or a purge stays final; a dead letter lives on in its dead-letter queue). Live
  messages (visible, delayed, leased) keep their state: they will be delivered anyway. A
  message whose rewound copy is still live is not copied again, so overlapping rewinds never
  make two live copies of one message.
* **How.** Each one is appended to the active segment as a new message (a new seq; the same
  id, body, attributes and send time), visible at once with receive count 0, like a `Tidy`
  copy forward: the copy is recorded in ``QueueState.moved`` with the acknowledged seq as its
  earlier seq (so ``QueueState.alias`` says which acknowledged messages have a live copy) and
  marked in its segment's ``copies`` and ``replays``. It has no time to live; its retention
  counts from the rewind (its first visibility).
* **The archive** writes each message once: the acknowledged original from its own segment
  (untouched by a rewind); a rewound copy is never archived (`Segment.outcome_of` skips
  ``replays``, and a `Tidy` copy of a rewound copy stays one).
* **Bounded work.** One command copies at most ``limit`` (`REWIND_MAX`) messages with seq at
  least ``from_seq`` and answers where the next part starts, so the leader proposes a long
  rewind in parts (`cmq.routing.ops.LeaderOps`) and no apply reads unboundedly many records.

FIFO queues refuse a rewind (a copy's new seq would reorder its group).
"""

from __future__ import annotations

import zlib
from bisect import bisect_left

from pyroaring import BitMap

from cmq import errors
from cmq.fsm.cells import Segment
from cmq.fsm.commands import CommandFailed, Rewind, Rewound
from cmq.fsm.effects import Effects
from cmq.fsm.queue import QueueState
from cmq.fsm.store import StoredMessage, encode_record
from cmq.fsm.writer import SegmentWriter

__all__ = ["REWIND_MAX", "acked_records", "rewind"]

REWIND_MAX = 1024
"""At most this many messages are made deliverable again by one `Rewind` command."""


def acked_records(seg: Segment) -> BitMap:
    """The records of ``seg`` that left the queue acknowledged (not copies forward, not rewound
    copies)."""
    out = BitMap(seg.deleted)
    for bits in (seg.expired, seg.dead, seg.purged, seg.moved, seg.replays):
        if bits:
            out.difference_update(bits)
    return out


def rewind(q: QueueState, cmd: Rewind, w: SegmentWriter, fx: Effects) -> Rewound | CommandFailed:
    """`Rewound`: see the module docstring."""
    if q.fifo is not None:
        return CommandFailed(
            errors.InvalidParameter.code,
            f"queue {q.name!r} is a FIFO queue: a rewind is for standard queues only",
        )
    q.advance(cmd.now_ms)
    keep = q.attributes.retain_acked_seconds * 1000
    if not keep:
        return Rewound(0, 0)
    limit = max(1, min(cmd.limit, REWIND_MAX))
    clock = q.clock
    floor = max(cmd.since_ms, clock - keep + 1)  # retained: sent after clock - keep
    end = q.next_seq  # the copies this command appends are never candidates
    copier = _Copier(q, w, clock)
    next_seq = 0
    for seg in list(q.segments):
        if seg.first_seq >= end or next_seq:
            break
        # Send-time entries are sorted; a copy's entry is at least its real send time, so the
        # records before ``lo`` were all sent before the floor.
        lo = max(bisect_left(seg.sent_at, floor), cmd.from_seq - seg.first_seq)
        if lo >= seg.count or not seg.deleted:
            continue
        window = BitMap()
        window.add_range(lo, seg.count)
        for rel in acked_records(seg) & window:
            seq = seg.first_seq + rel
            if seq in q.alias:  # its rewound copy is still live
                continue
            msg = w.read(q, seg, seq)
            if rel in seg.copies and msg.sent_at_ms < floor:
                continue
            if copier.count == limit:
                next_seq = seq
                break
            copier.copy(msg, seq)
    copier.finish()
    if copier.count:
        if q.start_floor is not None:
            q.start_floor = min(q.start_floor, clock)
        fx.change(q.name)
    return Rewound(copier.count, next_seq)


class _Copier:
    """Appends rewound copies to the queue's active segment (sealing and starting segments at
    the queue's limits), writing them in one append per segment."""

    __slots__ = ("clock", "count", "frames", "messages", "q", "target", "w")

    def __init__(self, q: QueueState, w: SegmentWriter, clock: int) -> None:
        self.q, self.w, self.clock = q, w, clock
        self.target = q.segments[-1] if q.segments and not q.segments[-1].sealed else None
        self.messages: list[StoredMessage] = []
        self.frames: list[bytes] = []
        self.count = 0

    def copy(self, msg: StoredMessage, old: int) -> None:
        q, w, target = self.q, self.w, self.target
        if target is None or w.must_seal(q, target):
            if target is not None:
                self.finish()
                w.seal(q, target)
            target = self.target = Segment(q.next_seq, self.clock)
            q.segments.append(target)
            q.firsts.append(target.first_seq)
        new = q.next_seq
        q.next_seq += 1
        # A rewound copy comes back at priority 0 (`ready` holds no level for it): its record
        # says so too, whatever level the original was sent at.
        stored = StoredMessage(msg.id, new, msg.body, msg.binary, msg.attributes, msg.sent_at_ms)
        frame = encode_record(stored, self.clock)
        self.messages.append(stored)
        self.frames.append(frame)
        target.copies.add(target.count)
        target.replays.add(target.count)
        # As a `Tidy` copy: the previous entry keeps the array sorted; the record holds the
        # real send time, and a restore gives copies the same entries (`restore_sent_keys`).
        target.sent_at.append(target.sent_at[-1] if target.sent_at else target.created_ms)
        target.add_visible(self.clock, force=True)
        target.count += 1
        target.size += len(frame)
        target.crc = zlib.crc32(frame, target.crc)
        q.moved[new] = (msg.sent_at_ms, (old,))
        q.alias[old] = new
        q.live += 1
        q.schedule(new, self.clock)
        self.count += 1

    def finish(self) -> None:
        """Write the copies appended so far."""
        if self.target is not None and self.messages:
            self.w.append(self.q, self.target, self.messages, self.frames)
            self.messages, self.frames = [], []
