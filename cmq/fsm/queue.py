"""Per-queue state of the queue machine (pure: no I/O, no clocks): `QueueState` with its
segments and the messages received at least once (`cmq.fsm.cells`), the lookups over them, the
changes several commands share, and the derived indexes a restore rebuilds. Its time, timers and
TTL deadlines are its base class `cmq.fsm.queuetime.QueueTime`; the leader's reads of the timed
work due on it are `cmq.fsm.timedwork`, its counts `cmq.fsm.gauges`.

See `cmq.fsm.machine` for the invariants; the snapshot image of a queue is `cmq.fsm.image`.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

from pyroaring import BitMap, BitMap64

from cmq import errors
from cmq.fsm.cells import (
    COUNT,
    FLAGS,
    LEASE,
    PENDING_DEAD_LETTER,
    VIS,
    Segment,
    Touched,
)
from cmq.fsm.commands.codec import write_attributes
from cmq.fsm.fifo_state import FifoState
from cmq.fsm.queuetime import QueueTime
from cmq.fsm.ready import ReadyIndex
from cmq.fsm.wire import Writer
from cmq.model import QueueAttributes, RetryPolicy


class QueueState(QueueTime):
    """All state of one queue (see the module docstring); its time and timer methods are
    `cmq.fsm.queuetime.QueueTime`'s."""

    __slots__ = (
        "acked_total",
        "alias",
        "attributes",
        "created_ms",
        "dead_lettered_total",
        "dedup",
        "expired_total",
        "fifo",
        "firsts",
        "gauges",
        "head",
        "image",
        "image_version",
        "incarnation",
        "key",
        "lease_counter",
        "live",
        "moved",
        "nacked_total",
        "name",
        "next_seq",
        "pending_dl",
        "ready",
        "received_total",
        "segment_age_ms",
        "segment_bytes",
        "segments",
        "sent_total",
        "start_floor",
        "touched",
    )

    def __init__(
        self,
        name: str,
        incarnation: int,
        attributes: QueueAttributes,
        created_ms: int,
        *,
        segment_bytes: int,
        segment_age_ms: int,
    ) -> None:
        super().__init__(created_ms)
        self.name = name
        self.incarnation = incarnation
        # The store's name for this queue: a re-created queue never meets its predecessor's
        # files (which may outlive it until the next snapshot).
        self.key = f"{name}.{incarnation}"
        self.attributes = attributes
        self.head = encode_head(name, attributes)
        self.created_ms = created_ms
        self.next_seq = 1
        self.lease_counter = 0
        self.live = 0
        self.sent_total = 0
        self.acked_total = 0
        self.dead_lettered_total = 0
        self.expired_total = 0
        # Counted as commands apply on this replica, never in the snapshot image: they start
        # at 0 when the state is built (creation, restore) — monitoring counters, not state.
        # received: messages handed out by a `Lease` (a FIFO attempt's replay not counted
        # again); nacked: leases released early (a `Nack`, or a `ChangeVisibility` to 0).
        self.received_total = 0
        self.nacked_total = 0
        self.segment_bytes = segment_bytes
        self.segment_age_ms = segment_age_ms
        self.segments: list[Segment] = []
        self.firsts: list[int] = []
        # Live messages copied forward by `Tidy`: seq -> (real send time, the seqs it had
        # before, oldest first). ``alias`` (derived): each earlier seq -> the current one, so a
        # receipt minted before a copy still names the message.
        self.moved: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.alias: dict[int, int] = {}
        self.touched = Touched()
        # dedup id -> (message id, seq, produced at); insertion order is time order.
        self.dedup: dict[str, tuple[str, int, int]] = {}
        # The ready messages, by priority level (`cmq.fsm.ready`; the levels are replicated).
        self.ready = ReadyIndex()
        self.pending_dl = BitMap64()
        # FIFO queues only (`cmq.fsm.fifo`): groups, their ids, receive attempts.
        self.fifo: FifoState | None = None
        # This queue's part of the snapshot image, kept until a command touches the queue.
        self.image: bytes | None = None
        # Its monitoring figures (`cmq.fsm.gauges`), kept likewise: (valid before this queue
        # time, the oldest visible send time, the figures but the name and the age).
        self.gauges: tuple[int, int | None, tuple[int, ...]] | None = None
        self.image_version = 0
        # A lower bound of the live messages' `retention_start` (None: not known), so
        # `cmq.fsm.timedwork.expirable` scans only when something may be due.
        self.start_floor: int | None = None

    def segment_of(self, seq: int) -> Segment | None:
        i = bisect_right(self.firsts, seq) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if seq < seg.first_seq + seg.count else None

    def resolve(self, seq: int) -> int:
        """The current seq of the message that had seq ``seq`` (copied forward since)."""
        return self.alias.get(seq, seq)

    def forget_moved(self, seq: int) -> None:
        """``seq`` is deleted: drop its copy bookkeeping, if any."""
        entry = self.moved.pop(seq, None)
        if entry is not None:
            for old in entry[1]:
                self.alias.pop(old, None)

    def rebuild_alias(self) -> None:
        self.alias = {old: seq for seq, (_, olds) in self.moved.items() for old in olds}

    def is_live(self, seq: int) -> bool:
        seg = self.segment_of(seq)
        return seg is not None and (seq - seg.first_seq) not in seg.deleted

    def first_live(self) -> tuple[Segment, int] | None:
        for seg in self.segments:
            if not seg.full():
                return seg, seg.deleted.flip(0, seg.count).min()
        return None

    def pending_dl_seqs(self) -> list[int]:
        return list(self.pending_dl)

    # -- changes shared by several commands ------------------------------------------------------
    def lease_slot(self, seq: int, lease_id: int) -> int | None:
        """The touched slot of ``seq`` if ``lease_id`` is its current lease."""
        slot = self.touched.slot_of.get(seq)
        if slot is None or lease_id == 0 or self.touched.get(slot, LEASE) != lease_id:
            return None
        return slot

    def inflight_slot(self, seq: int, lease_id: int) -> int | str:
        """The slot of ``seq`` if ``lease_id`` is its current *unexpired* lease, else a code."""
        slot = self.lease_slot(seq, lease_id)
        if slot is None:
            return errors.LEASE_STALE
        if not self.lease_live(slot):
            return errors.MESSAGE_NOT_INFLIGHT
        return slot

    def lease_live(self, slot: int) -> bool:
        """Whether the lease of touched ``slot`` is in flight: unexpired at the queue's time
        and not waiting for the dead-letter queue."""
        t = self.touched
        return not t.get(slot, FLAGS) & PENDING_DEAD_LETTER and t.get(slot, VIS) > self.clock

    def visible_at(self, slot: int) -> int:
        """When the touched message in ``slot`` becomes visible: its ``VIS``, and while it is
        leased (a lease, expired or not, not released by a nack) plus the queue's retry
        back-off for its receive count (`retry_delay`). Its timer is set to this; computed
        from the slot and the attributes alone, so a restore sets the same timers."""
        t = self.touched
        at = t.get(slot, VIS)
        retry = self.attributes.retry
        if retry is None or t.get(slot, LEASE) == 0:
            return at
        return at + self.retry_delay(slot, retry)

    def retry_delay(self, slot: int, retry: RetryPolicy) -> int:
        """The back-off (ms) of the touched message in ``slot`` under ``retry``: 0 once it
        reached the dead-letter limit (its next `Lease` moves it, without delay)."""
        count = self.touched.get(slot, COUNT)
        limit = self.attributes.max_receive_count if self.attributes.dead_letter_queue else 0
        if limit and count >= limit:
            return 0
        return retry.delay_ms(count)

    def reschedule_leased(self) -> None:
        """The attributes changed: every leased message's timer becomes `visible_at` under
        the new ones (as a restore would set it)."""
        t = self.touched
        for slot, seq in enumerate(t.seqs()):
            if t.get(slot, LEASE) != 0 and not t.get(slot, FLAGS) & PENDING_DEAD_LETTER:
                self.schedule(seq, self.visible_at(slot))

    def delete_prefix(self, end_seq: int, outcome: int) -> tuple[int, list[Segment]]:
        """Delete every live message with seq < ``end_seq`` (recording ``outcome`` for each);
        returns how many, and the segments that lost messages (the machine releases those
        that became full)."""
        count = 0
        hit: list[Segment] = []
        for seg in self.segments:
            if seg.first_seq >= end_seq:
                break
            hi = min(seg.count, end_seq - seg.first_seq)
            n = hi - seg.deleted.range_cardinality(0, hi)
            if n:
                newly = BitMap(range(hi))
                newly.difference_update(seg.deleted)
                bits = seg.outcome_bitmap(outcome)
                if bits is not None:
                    bits.update(newly)
                seg.deleted.update(newly)
                count += n
                hit.append(seg)
        if not count:
            return 0, hit
        touched = self.touched
        for slot, seq in enumerate(touched.seqs()):
            if seq < end_seq:
                owner = self.segment_of(seq)
                if owner is not None:
                    owner.record(seq - owner.first_seq, outcome, touched.get(slot, COUNT))
        for seq in [s for s in self.moved if s < end_seq]:
            self.forget_moved(seq)
        self.live -= count
        self.ready.forget_below(end_seq)
        self.pending_dl.remove_range(0, end_seq)
        if end_seq >= self.next_seq:
            self.timers.clear()
            self.touched.clear()
            self.ttl.clear()
            self.ttl_heap.clear()
        else:
            for seq in [s for s in self.ttl if s < end_seq]:
                del self.ttl[seq]
            # The deleted messages' timer entries no longer stand (`timer_valid`).
            for seq in [s for s in self.touched.seqs() if s < end_seq]:
                self.touched.remove(seq)
        return count, hit

    # -- derived indexes, rebuilt on restore -----------------------------------------------------
    def rebuild_derived(self, seg: Segment, visible_at: array[int]) -> None:
        """Ready/timers for the untouched live messages of ``seg`` (touched: separately)."""
        if seg.count == 0:
            return
        live = BitMap(range(seg.count))
        live.difference_update(seg.deleted)
        lo, hi = seg.first_seq, seg.first_seq + seg.count
        touched_rel = BitMap(s - lo for s in self.touched.seqs() if lo <= s < hi)
        live.difference_update(touched_rel)
        if not live:
            return
        if max(visible_at) <= self.clock:
            # The common case, in C: nothing of this segment is still delayed.
            if len(live) == seg.count:  # a backlog's segment: all of it, one range
                self.ready.add_range(lo, hi)
                return
            rel = BitMap64(array("Q", live.to_array()))
            self.ready.update(rel.shift(lo) if lo else rel)
            return
        # Straight into the index: nothing is superseded yet, so no compaction.
        clock, add, ready = self.clock, self.timers.add, self.ready
        for r in live:
            at = visible_at[r]
            if at > clock:
                add(lo + r, at)
            else:
                ready.add(lo + r)

    def rebuild_touched(self) -> None:
        t = self.touched
        for slot, seq in enumerate(t.seqs()):
            if t.get(slot, FLAGS) & PENDING_DEAD_LETTER:
                self.pending_dl.add(seq)
            else:
                self.schedule(seq, self.visible_at(slot))


def encode_head(name: str, attributes: QueueAttributes) -> bytes:
    """The first bytes of a queue's image part: its name and attributes."""
    w = Writer()
    w.text(name)
    write_attributes(w, attributes)
    return w.getvalue()
