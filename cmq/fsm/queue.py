"""Per-queue state of the queue machine (pure: no I/O, no clocks): `QueueState` with its
segments and the messages received at least once (`cmq.fsm.cells`), the queue's time, timers
and TTL deadlines, the changes several commands share, and the read-only queries the leader
answers from it (visibility, what timed work is due; its counts are `cmq.fsm.gauges`).

See `cmq.fsm.machine` for the invariants; the snapshot image of a queue is `cmq.fsm.image`.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

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
from cmq.fsm.ready import ReadyIndex
from cmq.fsm.timers import BUCKET_SHIFT, COMPACT_SLACK, TimerIndex
from cmq.fsm.wire import Writer
from cmq.model import QueueAttributes, RetryPolicy

COMPACT_MAX_LIVE = 64
COMPACT_RATIO = 8
"""A sealed segment is *sparse* (its live messages are copied forward by `Tidy`) when it holds
at most `COMPACT_MAX_LIVE` live messages and at most 1/`COMPACT_RATIO` of its records."""
SLEW_DIVISOR = 10
"""A retimed queue's time runs 1/10 slow until its lead is gone (a 2 h lead: 20 h; leases last
11 % longer meanwhile). Like NTP's slew: time never runs backwards nor stands still."""


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


class QueueState:
    """All state of one queue (see the module docstring)."""

    __slots__ = (
        "acked_total",
        "alias",
        "attributes",
        "clock",
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
        "skew",
        "skew_stamp",
        "start_floor",
        "timers",
        "touched",
        "ttl",
        "ttl_heap",
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
        self.name = name
        self.incarnation = incarnation
        # The store's name for this queue: a re-created queue never meets its predecessor's
        # files (which may outlive it until the next snapshot).
        self.key = f"{name}.{incarnation}"
        self.attributes = attributes
        self.head = encode_head(name, attributes)
        self.created_ms = created_ms
        self.clock = created_ms
        # The queue's time minus the leader's clock, while a `Retime` lead is being slewed off
        # (0 otherwise), and the leader stamp up to which the slew is accounted.
        self.skew = 0
        self.skew_stamp = 0
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
        # When each invisible message becomes visible (`cmq.fsm.timers`; entries checked
        # against `timer_valid`).
        self.timers = TimerIndex()
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
        # `expirable` scans only when something may be due.
        self.start_floor: int | None = None
        # Live messages sent with a time to live: seq -> deadline (queue time; in the image,
        # version 4), and a heap of (deadline, seq) over it (derived; superseded entries skipped).
        self.ttl: dict[int, int] = {}
        self.ttl_heap: list[tuple[int, int]] = []

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

    def skew_at(self, now_ms: int) -> int:
        """The skew left when the leader's clock reads ``now_ms``, slewed as `advance` would."""
        if not self.skew:
            return 0
        gone = (now_ms - self.skew_stamp) // SLEW_DIVISOR
        return max(0, self.skew - gone) if gone > 0 else self.skew

    def time_at(self, now_ms: int) -> int:
        """The queue's time when the leader's clock reads ``now_ms``: what `advance` would
        make it (a read: nothing moves), so a read never promises more than a command finds."""
        return max(self.clock, now_ms + self.skew_at(now_ms))

    def retime(self, now_ms: int) -> int:
        """The queue's time is ahead of the leader's clock ``now_ms``: keep the lead as a skew
        that `advance` slews off, so the time runs on instead of standing still. Returns the
        lead (ms, 0 if there was none). Never moves the time back."""
        self.advance(now_ms)
        ahead = self.clock - now_ms
        if ahead <= 0:
            return 0
        self.skew, self.skew_stamp = ahead, now_ms
        return ahead

    def advance(self, now_ms: int) -> None:
        """Move the clock to the queue's time at ``now_ms`` (never back) and make due messages
        ready. While a skew is left (`retime`), the time runs at 1 - 1/`SLEW_DIVISOR` of the
        leaders' clocks' rate until it has slewed off (exact integer accounting)."""
        if self.skew:
            gone = (now_ms - self.skew_stamp) // SLEW_DIVISOR
            if gone > 0:
                self.skew_stamp += gone * SLEW_DIVISOR
                self.skew = max(0, self.skew - gone)
        self.clock = max(self.clock, now_ms + self.skew)
        ready = self.ready
        for seq in self.timers.pop_due(self.clock, self.timer_valid):
            ready.add(seq)

    def schedule(self, seq: int, at: int) -> None:
        """The live, not pending-dead-letter message ``seq`` becomes visible at ``at`` (its
        authoritative time: see `timer_valid`)."""
        if at <= self.clock:
            self.ready.add(seq)
            return
        self.ready.discard(seq)
        timers = self.timers
        timers.add(seq, at)
        # A live message has at most one standing entry: past twice that, most are superseded.
        if timers.size > 2 * self.live + COMPACT_SLACK:
            timers.compact(self.timer_valid)

    def timer_valid(self, seq: int, at: int) -> bool:
        """Whether the timer entry (``at``, ``seq``) stands. A live message that is neither
        ready nor waiting for the dead-letter queue has one timer: a touched message's at
        `visible_at` of its slot, an untouched one's at its record's visibility (the entry made
        when it was sent, or copied forward; nothing changes it while untouched)."""
        if seq in self.ready.all or seq in self.pending_dl:
            return False
        slot = self.touched.slot_of.get(seq)
        if slot is not None:
            return self.visible_at(slot) == at
        return self.is_live(seq)

    def timer_at(self, seq: int) -> int | None:
        """When the live message ``seq`` becomes visible, if it has a timer (None: ready,
        waiting for the dead-letter queue, or gone). For an untouched message: a scan."""
        if seq in self.ready.all or seq in self.pending_dl or not self.is_live(seq):
            return None
        slot = self.touched.slot_of.get(seq)
        if slot is not None:
            return self.visible_at(slot)
        return self.timers.find({seq}, self.timer_valid).get(seq)

    def timers_of(self, seqs: set[int]) -> dict[int, int]:
        """`timer_at` of each of the untouched ``seqs`` that has a timer, in one scan."""
        return self.timers.find(seqs, self.timer_valid)

    def pending_timers(self) -> Iterator[tuple[int, int]]:
        """(seq, at) of every message with a timer, each once, in no particular order."""
        slot_of, valid = self.touched.slot_of, self.timer_valid
        for seq, at in self.timers.entries():
            if seq not in slot_of and valid(seq, at):
                yield seq, at
        yield from self.touched_timers()

    def touched_timers(self) -> Iterator[tuple[int, int]]:
        """(seq, at) of every touched message with a timer (its slot's `visible_at`)."""
        t, ready = self.touched, self.ready.all
        for slot, seq in enumerate(t.seqs()):
            if not t.get(slot, FLAGS) & PENDING_DEAD_LETTER and seq not in ready:
                yield seq, self.visible_at(slot)

    def untouched_timers(self, clock: int) -> tuple[list[int], int, int | None]:
        """The untouched messages' timers at queue time ``clock``: the seqs due by then, how
        many are later, and the earliest later time (None: none). Whole buckets are counted
        in C (their seqs intersected with the live untouched ones: an untouched message's
        entry stands exactly while it is live and untouched); only the opened entries, the
        buckets due by ``clock`` and the first later one are walked."""
        live = BitMap64()
        for seg in self.segments:
            if not seg.full():
                rels = BitMap64(array("Q", seg.deleted.flip(0, seg.count).to_array()))
                live |= rels.shift(seg.first_seq) if seg.first_seq else rels
        if self.touched:
            live.difference_update(BitMap64(array("Q", self.touched.seqs())))
        due: list[int] = []
        later = 0
        next_at: int | None = None
        index = self.timers
        for at, seq in index.near:
            if seq in live:
                if at <= clock:
                    due.append(seq)
                else:
                    later += 1
                    next_at = at if next_at is None else min(next_at, at)
        limit = clock >> BUCKET_SHIFT
        rest: array[int] = array("q")
        for key in sorted(index.buckets):
            bucket = index.buckets[key]
            if key > limit and next_at is not None and key << BUCKET_SHIFT > next_at:
                rest.extend(bucket[1::2])  # counted below, in one intersection
                continue
            for i in range(1, len(bucket), 2):
                seq = bucket[i]
                if seq in live:
                    at = bucket[i - 1]
                    if at <= clock:
                        due.append(seq)
                    else:
                        later += 1
                        next_at = at if next_at is None else min(next_at, at)
        if rest:
            later += len(BitMap64(array("Q", rest)) & live)
        return due, later, next_at

    # -- time to live ------------------------------------------------------------------------
    def set_ttl(self, seq: int, deadline: int) -> None:
        """The live message ``seq`` is never delivered once the queue's time reaches
        ``deadline``."""
        self.ttl[seq] = deadline
        heapq.heappush(self.ttl_heap, (deadline, seq))
        if len(self.ttl_heap) > 2 * len(self.ttl) + 1024:
            self.rebuild_ttl()

    def rebuild_ttl(self) -> None:
        self.ttl_heap = [(d, s) for s, d in self.ttl.items()]
        heapq.heapify(self.ttl_heap)

    def next_ttl(self) -> int | None:
        """The earliest deadline of a live message with a time to live (None: none)."""
        heap, ttl = self.ttl_heap, self.ttl
        while heap and ttl.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def ttl_due(self) -> list[int]:
        """The seqs whose deadline the queue's time has reached (ascending); their heap
        entries are dropped (the caller deletes them)."""
        heap, ttl, out = self.ttl_heap, self.ttl, []
        while heap and heap[0][0] <= self.clock:
            deadline, seq = heapq.heappop(heap)
            if ttl.get(seq) == deadline:
                out.append(seq)
        return sorted(out)

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

    # -- reads (the leader's queries; see `QueueMachine`) ---------------------------------------
    def oldest_sent(self) -> int | None:
        """The send time of the oldest live message (copies forward included)."""
        first = self.first_live()
        oldest = None if first is None else first[0].sent_at[first[1]]
        for sent, _ in self.moved.values():
            if oldest is None or sent < oldest:
                oldest = sent
        return oldest

    def has_visible(self, now_ms: int) -> bool:
        """Whether a `Lease` at ``now_ms`` would find a message."""
        if self.ready.all:
            return True
        at = self.timers.earliest(self.timer_valid)
        return at is not None and at <= self.time_at(now_ms)

    def next_visible_at(self) -> int | None:
        """The earliest time an invisible message (delayed, leased, nacked) becomes visible."""
        return self.timers.earliest(self.timer_valid)

    def retention_start(self, seg: Segment, rel: int) -> int:
        """When the message of record ``rel`` of ``seg`` first became visible: retention
        counts from then (a delayed message never expires before it was deliverable). Its
        send time plus its send's delay; for a message copied forward, its original's."""
        vf = seg.visible_from
        if vf is not None:
            return vf[rel]
        if rel in seg.copies:
            return self.moved[seg.first_seq + rel][0]
        return seg.sent_at[rel]

    def min_start(self) -> int | None:
        """The least `retention_start` of a live message (None: none). Scans the live
        messages of the segments with delayed records; the others' first live record."""
        best: int | None = None
        for seg in self.segments:
            if seg.full():
                continue
            if seg.visible_from is None:
                live = seg.deleted.flip(0, seg.count)
                first = live.min()
                at = self.retention_start(seg, first)
                for rel in seg.copies & live:
                    at = min(at, self.retention_start(seg, rel))
            elif not seg.deleted:
                at = min(seg.visible_from)  # in C: nothing of the segment is deleted yet
            else:
                vf = seg.visible_from
                at = min(vf[rel] for rel in seg.deleted.flip(0, seg.count))
            best = at if best is None else min(best, at)
        return best

    def expirable(self, now_ms: int) -> bool:
        """Whether an `Expire` at ``now_ms`` would delete something: a live message whose
        `retention_start` is at least the retention before the queue's time."""
        cutoff = self.time_at(now_ms) - self.attributes.message_retention_seconds * 1000
        floor = self.start_floor
        if floor is None:
            floor = self.start_floor = self.min_start()
        if floor is None or floor > cutoff:
            deadline = self.next_ttl()
            return deadline is not None and deadline <= self.time_at(now_ms)
        exact = self.start_floor = self.min_start()
        if exact is not None and exact <= cutoff:
            return True
        deadline = self.next_ttl()
        return deadline is not None and deadline <= self.time_at(now_ms)

    def retaining(self, seg: Segment, clock: int | None = None) -> bool:
        """Whether the queue's ``retain_acked_seconds`` still keeps ``seg`` at queue time
        ``clock`` (default: now): a rewind may want its records while its newest record's
        send-time entry is within that retention of the time."""
        keep = self.attributes.retain_acked_seconds * 1000
        at = self.clock if clock is None else clock
        return bool(keep and seg.count and seg.sent_at[-1] + keep > at)

    def archive_done(self, seg: Segment) -> bool:
        """Whether the archive is done with the released ``seg``: archived, or nothing of it
        to archive (no ``archive``, or only copies)."""
        return seg.archived or not self.attributes.archive or seg.archivable() == 0

    def settle_due(self, now_ms: int) -> bool:
        """Whether a `Tidy` at ``now_ms`` would forget a released segment whose archive and
        retention are both done (`cmq.fsm.writer.SegmentWriter.settle`)."""
        clock = self.time_at(now_ms)
        return any(
            seg.released and self.archive_done(seg) and not self.retaining(seg, clock)
            for seg in self.segments
        )

    def due(self, now_ms: int, dead_letter_limit: int) -> Due | None:
        """What is due at ``now_ms`` (None: nothing)."""
        expire = self.expirable(now_ms)
        dlq = self.attributes.dead_letter_queue
        dead: tuple[int, ...] = ()
        if dlq and self.pending_dl:
            dead = tuple(self.pending_dl_seqs()[:dead_letter_limit])
        tidy = self.seal_due(now_ms) or any(True for _ in self.sparse()) or self.settle_due(now_ms)
        if not expire and not dead and not tidy:
            return None
        return Due(self.name, now_ms, expire, dead, dlq or "", tidy)

    def seal_due(self, now_ms: int) -> bool:
        """Whether the active segment is older than the queue's segment age at ``now_ms``."""
        if not self.segments or self.segments[-1].sealed:
            return False
        seg = self.segments[-1]
        return self.time_at(now_ms) - seg.created_ms >= self.segment_age_ms

    def sparse(self) -> Iterator[Segment]:
        """The sealed segments whose few live messages `Tidy` copies forward, oldest first.
        Never on a FIFO queue: a copy gets a new seq, which would reorder its group."""
        if self.fifo is not None:
            return
        for seg in self.segments:
            if not seg.sealed or seg.released:
                continue
            live = seg.count - len(seg.deleted)
            if 0 < live <= COMPACT_MAX_LIVE and live * COMPACT_RATIO <= seg.count:
                yield seg

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
