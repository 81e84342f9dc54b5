"""A queue's time and timers (pure: no I/O, no clocks): `QueueTime`, the base class of
`cmq.fsm.queue.QueueState` that moves the queue's time (``clock``, a `Retime` lead slewed off),
makes messages ready when their timers are due, keeps the timer entries (`cmq.fsm.timers`) and
the time-to-live deadlines.

Time: the queue's time is the largest leader's clock reading any command for it carried, plus
the lead left to slew off (see `cmq.fsm.machine`); reads ask what it would be at a clock reading
(`QueueTime.time_at`) and never move it.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyroaring import BitMap64

from cmq.fsm.cells import FLAGS, PENDING_DEAD_LETTER, Segment, Touched
from cmq.fsm.ready import ReadyIndex
from cmq.fsm.timers import BUCKET_SHIFT, COMPACT_SLACK, TimerIndex

__all__ = ["SLEW_DIVISOR", "QueueTime"]

SLEW_DIVISOR = 10
"""A retimed queue's time runs 1/10 slow until its lead is gone (a 2 h lead: 20 h; leases last
11 % longer meanwhile). Like NTP's slew: time never runs backwards nor stands still."""


class QueueTime:
    """A queue's time, its timers and its time-to-live deadlines: the base class of
    `cmq.fsm.queue.QueueState`, whose other attributes it reads are declared (not set) here.

    Every live message is in exactly one of ``ready``, ``timers`` (a standing entry: see
    `timer_valid`) and ``pending_dl`` (see `cmq.fsm.machine`); `schedule` and `advance` move
    messages between the first two."""

    __slots__ = ("clock", "skew", "skew_stamp", "timers", "ttl", "ttl_heap")

    # The subclass's state read here (`cmq.fsm.queue.QueueState` documents and sets it).
    live: int
    segments: list[Segment]
    touched: Touched
    ready: ReadyIndex
    pending_dl: BitMap64

    def __init__(self, created_ms: int) -> None:
        # The queue's time (ms): `advance` moves it, never back.
        self.clock = created_ms
        # The queue's time minus the leader's clock, while a `Retime` lead is being slewed off
        # (0 otherwise), and the leader stamp up to which the slew is accounted.
        self.skew = 0
        self.skew_stamp = 0
        # When each invisible message becomes visible (`cmq.fsm.timers`; entries checked
        # against `timer_valid`).
        self.timers = TimerIndex()
        # Live messages sent with a time to live: seq -> deadline (queue time; in the image,
        # version 4), and a heap of (deadline, seq) over it (derived; superseded entries skipped).
        self.ttl: dict[int, int] = {}
        self.ttl_heap: list[tuple[int, int]] = []

    if TYPE_CHECKING:  # `cmq.fsm.queue.QueueState`'s lookups, declared for the type checker

        def is_live(self, seq: int) -> bool: ...

        def visible_at(self, slot: int) -> int: ...

    # -- the queue's time --------------------------------------------------------------------
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

    # -- timers (when each invisible message becomes visible) --------------------------------
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
