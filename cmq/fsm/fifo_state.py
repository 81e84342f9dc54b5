"""The FIFO part of a queue's state (`FifoState`, one per FIFO queue; pure), kept by
`cmq.fsm.queue.QueueState` and changed by the rules of `cmq.fsm.fifo`:

* ``meta``: per live message, its group id and deduplication id (in the snapshot image; the
  segment records do not carry them);
* ``attempts``: receive attempt id -> (time, the (seq, lease id) pairs it leased), at most
  `MAX_ATTEMPTS`, forgotten after `DEDUP_WINDOW_MS` (in the image);
* derived, rebuilt from ``meta`` on restore: ``groups`` (group -> its live seqs, ascending =
  send order: a FIFO queue's messages are never copied forward, see `cmq.fsm.timedwork.sparse`) and
  ``heads`` (the seq at the front of each group).
"""

from __future__ import annotations

from collections import deque

from pyroaring import BitMap64

from cmq.model import DEDUP_WINDOW_MS

__all__ = ["MAX_ATTEMPTS", "FifoState"]

MAX_ATTEMPTS = 1000
"""Receive attempt ids remembered per FIFO queue; beyond it the oldest is forgotten early (a
retry of a forgotten attempt is served as a new receive)."""


class FifoState:
    """The FIFO part of one queue's state (see the module docstring)."""

    __slots__ = ("attempts", "groups", "heads", "meta")

    def __init__(self) -> None:
        self.meta: dict[int, tuple[str, str]] = {}
        self.attempts: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}
        self.groups: dict[str, deque[int]] = {}
        self.heads = BitMap64()

    def add(self, seq: int, group: str, dedup_id: str) -> None:
        """Append the new message ``seq`` (the highest seq so far) to ``group``."""
        self.meta[seq] = (group, dedup_id)
        members = self.groups.get(group)
        if members is None:
            self.groups[group] = deque((seq,))
            self.heads.add(seq)
        else:
            members.append(seq)

    def drop(self, seq: int) -> None:
        """``seq`` left the queue (acked, expired, dead-lettered, purged)."""
        entry = self.meta.pop(seq, None)
        if entry is None:
            return
        group = entry[0]
        members = self.groups[group]
        if members[0] == seq:
            members.popleft()
            self.heads.discard(seq)
            if members:
                self.heads.add(members[0])
            else:
                del self.groups[group]
        else:
            members.remove(seq)

    def drop_below(self, end_seq: int) -> None:
        """Every message with seq < ``end_seq`` left the queue."""
        for seq in sorted(s for s in self.meta if s < end_seq):
            self.drop(seq)

    def rebuild(self) -> None:
        """The derived ``groups`` and ``heads`` from ``meta`` (after a restore)."""
        self.groups, self.heads = {}, BitMap64()
        meta, self.meta = self.meta, {}
        for seq in sorted(meta):
            self.add(seq, *meta[seq])

    def forget_attempts(self, clock: int) -> None:
        """Drop attempts older than the window at ``clock`` (insertion order is time order)."""
        attempts = self.attempts
        while attempts:
            oldest = next(iter(attempts))
            if clock - attempts[oldest][0] < DEDUP_WINDOW_MS:
                break
            del attempts[oldest]

    def remember(self, attempt_id: str, clock: int, leases: tuple[tuple[int, int], ...]) -> None:
        self.attempts.pop(attempt_id, None)
        while len(self.attempts) >= MAX_ATTEMPTS:
            del self.attempts[next(iter(self.attempts))]
        self.attempts[attempt_id] = (clock, leases)
