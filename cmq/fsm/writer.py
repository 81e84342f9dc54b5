"""`SegmentWriter`: how the queue machine's commands change a queue's segments (pure apply logic;
bytes go through the `SegmentStore`, releases are recorded as `Effects`).

* appends: records go to the active segment through the store, which must agree on its size;
* seals: a segment is sealed at the queue's size or age limit (`must_seal`), no more appends;
* deletions: a deleted message's outcome and final receive count are recorded in its segment
  (part of the snapshot image, so a released segment's records stream with them);
* releases: a sealed segment whose every message is deleted is *released*: kept on a queue with
  ``archive`` until `MarkArchived` (`cmq.fsm.lifecycle`) and on a queue with
  ``retain_acked_seconds`` until that retention has passed (`settle`; whichever ends last),
  else forgotten at once, its files removed once no durable snapshot lists them
  (`Effects.release`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from cmq.errors import InvariantBroken
from cmq.fsm import timedwork
from cmq.fsm.cells import COUNT, Segment
from cmq.fsm.effects import Effects
from cmq.fsm.queue import QueueState
from cmq.fsm.store import SegmentStore, StoredMessage

__all__ = ["SegmentWriter"]


class SegmentWriter:
    """Changes the segments of the queues of one group (see the module docstring).

    ``segment_bytes`` / ``segment_age_ms``: for tests and simulations, lower the segment limits
    every queue recorded at its creation; every replica of a group must use the same values."""

    __slots__ = ("_age_ms", "_bytes", "_effects", "store")

    def __init__(
        self,
        store: SegmentStore,
        effects: Effects,
        *,
        segment_bytes: int | None = None,
        segment_age_ms: int | None = None,
    ) -> None:
        self.store = store
        self._effects = effects
        self._bytes = segment_bytes
        self._age_ms = segment_age_ms

    # -- limits ------------------------------------------------------------------------------
    def segment_bytes(self, q: QueueState) -> int:
        """The size at which ``q``'s segments are sealed."""
        limit = self._bytes
        return q.segment_bytes if limit is None else min(limit, q.segment_bytes)

    def segment_age(self, q: QueueState) -> int:
        """The age (ms) at which ``q``'s segments are sealed."""
        limit = self._age_ms
        return q.segment_age_ms if limit is None else min(limit, q.segment_age_ms)

    def must_seal(self, q: QueueState, seg: Segment) -> bool:
        return seg.size >= self.segment_bytes(q) or q.clock - seg.created_ms >= self.segment_age(q)

    # -- appends and seals -------------------------------------------------------------------
    def append(
        self,
        q: QueueState,
        seg: Segment,
        messages: Sequence[StoredMessage],
        frames: Sequence[bytes],
    ) -> None:
        """Append ``frames`` (of ``messages``) to ``seg``, whose size already counts them."""
        size = self.store.append(q.key, seg.first_seq, messages, frames)
        if size != seg.size:
            raise InvariantBroken(
                f"queue {q.name!r} segment {seg.first_seq}: store size {size} != {seg.size}"
            )

    def seal(self, q: QueueState, seg: Segment) -> None:
        seg.sealed = True
        self.store.seal(q.key, seg.first_seq)
        self.maybe_release(q, seg)

    def read(self, q: QueueState, seg: Segment, seq: int) -> StoredMessage:
        """The stored record of message ``seq`` of ``seg``."""
        return self.store.read(q.key, seg.first_seq, seq)

    # -- deletions and releases --------------------------------------------------------------
    def delete_one(self, q: QueueState, seq: int, outcome: int) -> bool:
        """Delete the live message ``seq`` (recording ``outcome``); False if already gone."""
        seg = q.segment_of(seq)
        if seg is None:
            return False
        rel = seq - seg.first_seq
        if rel in seg.deleted:
            return False
        slot = q.touched.slot_of.get(seq)
        seg.record(rel, outcome, 0 if slot is None else q.touched.get(slot, COUNT))
        seg.deleted.add(rel)
        q.forget_moved(seq)
        q.live -= 1
        q.ready.forget(seq)
        q.pending_dl.discard(seq)
        q.ttl.pop(seq, None)
        q.touched.remove(seq)
        if q.fifo is not None:
            q.fifo.drop(seq)
        self.maybe_release(q, seg)
        return True

    def delete_prefix(self, q: QueueState, end_seq: int, outcome: int) -> int:
        """Delete every live message with seq < ``end_seq``; returns how many."""
        count, hit = q.delete_prefix(end_seq, outcome)
        if count and q.fifo is not None:
            q.fifo.drop_below(end_seq)
        for seg in hit:
            self.maybe_release(q, seg)
        return count

    def maybe_release(self, q: QueueState, seg: Segment) -> None:
        """Release ``seg`` if it is sealed and every message is deleted: kept for the archive
        (``archive`` queues) or the rewind retention, else forgotten (`settle`)."""
        if seg.released or not (seg.sealed and seg.full()):
            return
        seg.released = True
        self.settle(q, seg)

    def settle(self, q: QueueState, seg: Segment) -> bool:
        """The released ``seg``: forgotten once the archive is done with it and the queue's
        ``retain_acked_seconds`` no longer keeps it (True); kept for the archive (still
        ``released``) or, archive done, for rewinds (``archived``) otherwise."""
        if not timedwork.archive_done(q, seg):
            return False
        if timedwork.retaining(q, seg):
            seg.archived = True
            return False
        self.forget(q, seg)
        return True

    def forget(self, q: QueueState, seg: Segment) -> None:
        """Drop ``seg`` from the state; its files are removed once no durable snapshot lists
        it (`Effects.release`)."""
        i = bisect_right(q.firsts, seg.first_seq) - 1
        if i < 0 or q.segments[i] is not seg:
            raise InvariantBroken(f"queue {q.name!r}: segment {seg.first_seq} not in its list")
        del q.segments[i]
        del q.firsts[i]
        self._effects.release(q.key, seg)
