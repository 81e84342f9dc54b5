"""`TimerIndex`: when invisible messages become visible, bucketed by time (pure, derived).

A queue's timers (delayed sends, leases, nacks with a delay, back-offs) are ``(at, seq)``
entries. Far ones sit in coarse *buckets* of ``2**BUCKET_SHIFT`` ms (about 65 s): one compact
``array('q')`` of interleaved (at, seq) per bucket and a heap of the bucket keys, about 16 bytes
per entry, with no Python object per message. A bucket is *opened* when the queue's time reaches
its start, or when a query needs the earliest time: its entries move into ``near``, an exact heap
of tuples that holds only the opened buckets' entries (the next minute or so: mostly leases).

No per-message dict: the index never deletes or updates an entry. A caller-given predicate
``valid(seq, at)`` decides whether an entry still stands, against the authoritative time (the
touched slot's visibility, the message's liveness; see `cmq.fsm.queuetime.QueueTime.timer_valid`);
superseded entries are dropped as they surface, and by a compaction once they outnumber the rest.

Derived state: rebuilt on restore from the segments' per-record visibility times and the
touched slots, never in the snapshot image; its layout is free to change.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Iterator

BUCKET_SHIFT = 16
"""A bucket holds the entries whose time >> BUCKET_SHIFT is its key (2**16 ms = 65.536 s)."""
COMPACT_SLACK = 1024
"""Entries allowed beyond twice the bound on standing ones before a compaction (`compact`)."""

Valid = Callable[[int, int], bool]
"""``valid(seq, at)``: whether the entry (at, seq) still stands."""

__all__ = ["BUCKET_SHIFT", "COMPACT_SLACK", "TimerIndex", "Valid"]


class TimerIndex:
    """Timer entries ``(at, seq)`` in time buckets (see the module docstring).

    Contract: `pop_due` yields, over its calls, every standing entry exactly when the time
    passed to it reaches the entry's time (order within one call unspecified); `earliest` is
    the least standing time. Both depend only on the entries added and ``valid``, never on how
    they are bucketed, so the index changes nothing observable."""

    __slots__ = ("buckets", "keys", "near", "opened", "size")

    def __init__(self) -> None:
        self.buckets: dict[int, array[int]] = {}
        self.keys: list[int] = []
        """Heap of the keys of ``buckets`` (each bucket key once)."""
        self.near: list[tuple[int, int]] = []
        """Heap of the (at, seq) entries of the opened buckets."""
        self.opened = -(1 << 62)
        """Every bucket with a key up to this one is opened (its entries are in ``near``)."""
        self.size = 0
        """Entries held, standing or superseded."""

    def __len__(self) -> int:
        return self.size

    def add(self, seq: int, at: int) -> None:
        key = at >> BUCKET_SHIFT
        if key <= self.opened:
            heapq.heappush(self.near, (at, seq))
        else:
            bucket = self.buckets.get(key)
            if bucket is None:
                bucket = self.buckets[key] = array("q")
                heapq.heappush(self.keys, key)
            bucket.append(at)
            bucket.append(seq)
        self.size += 1

    def clear(self) -> None:
        self.buckets.clear()
        self.keys.clear()
        self.near.clear()
        self.size = 0

    def _open_first(self) -> None:
        key = heapq.heappop(self.keys)
        bucket = self.buckets.pop(key)
        near = self.near
        near.extend(zip(bucket[0::2], bucket[1::2], strict=True))
        heapq.heapify(near)
        self.opened = key

    def pop_due(self, now: int, valid: Valid) -> Iterator[int]:
        """Remove every entry with time <= ``now``; yield the seq of each standing one (checked
        as it is reached, so a caller may change what ``valid`` sees between yields)."""
        keys, near = self.keys, self.near
        limit = now >> BUCKET_SHIFT
        while keys and keys[0] <= limit:
            self._open_first()
        while near and near[0][0] <= now:
            at, seq = heapq.heappop(near)
            self.size -= 1
            if valid(seq, at):
                yield seq

    def earliest(self, valid: Valid) -> int | None:
        """The least time of a standing entry (None: none); drops superseded ones on the way."""
        keys, near = self.keys, self.near
        while True:
            while near and not valid(near[0][1], near[0][0]):
                heapq.heappop(near)
                self.size -= 1
            if keys and (not near or near[0][0] >= keys[0] << BUCKET_SHIFT):
                self._open_first()
                continue
            return near[0][0] if near else None

    def entries(self) -> Iterator[tuple[int, int]]:
        """Every entry held as (seq, at), standing or not, in no particular order."""
        for at, seq in self.near:
            yield seq, at
        for bucket in self.buckets.values():
            yield from zip(bucket[1::2], bucket[0::2], strict=True)

    def find(self, seqs: set[int], valid: Valid) -> dict[int, int]:
        """The standing time of each of ``seqs`` that has one: a scan of every entry, for the
        rare reads that need a single message's timer (export, copy-forward)."""
        out: dict[int, int] = {}
        if not seqs:
            return out
        for at, seq in self.near:
            if seq in seqs and valid(seq, at):
                out[seq] = at
        for bucket in self.buckets.values():
            hits = seqs.intersection(bucket[1::2])
            if not hits:
                continue
            for i in range(1, len(bucket), 2):
                seq = bucket[i]
                if seq in hits and valid(seq, bucket[i - 1]):
                    out[seq] = bucket[i - 1]
        return out

    def compact(self, valid: Valid) -> None:
        """Drop the superseded entries and repeats: one entry per seq is left (a seq's
        standing time is unique). The caller calls it once more than half the entries must be
        superseded (more entries than twice a bound on the seqs with one, plus
        `COMPACT_SLACK`): amortised O(1) per `add`."""
        keep = {seq: at for seq, at in self.entries() if valid(seq, at)}
        opened = self.opened
        self.clear()
        self.opened = opened
        for seq, at in keep.items():
            self.add(seq, at)
