"""`SnapshotPolicy`: when one group takes a snapshot, and how much log it keeps after one (pure).

A group snapshots once ``snapshot_entries`` entries or ``snapshot_bytes`` bytes were applied
since its last snapshot (entries carry whole batches, so both bounds matter), or at the next
opportunity after the host asked (`request`: the group pins old WAL segments, or a periodic
snapshot is due) when it applied anything since. After a snapshot at ``index`` the log is
compacted, but a bounded tail before ``index`` (at most ``keep_entries`` entries and
``keep_bytes`` bytes) stays in memory, so a follower only slightly behind gets entries instead
of a whole snapshot.
"""

from __future__ import annotations

from collections import deque

from raftlog.runtime.group_options import GroupOptions


class SnapshotPolicy:
    """The bookkeeping behind one group's snapshots (see the module docstring)."""

    __slots__ = ("_applied", "_bytes", "_options", "last", "requested")

    def __init__(self, options: GroupOptions, last: int) -> None:
        self._options = options
        self.last = last
        """The index of the latest snapshot (taken here or installed)."""
        self.requested = False
        """The host asked for a snapshot at the next opportunity."""
        # (index, size) of entries applied since the last snapshot.
        self._applied: deque[tuple[int, int]] = deque()
        self._bytes = 0

    def note_applied(self, index: int, size: int) -> None:
        """Entry ``index`` of ``size`` data bytes was applied."""
        self._applied.append((index, size))
        self._bytes += size

    def due(self, applied: int) -> bool:
        """Whether the bounds call for a snapshot now (``applied``: the last applied index)."""
        return (
            applied - self.last >= self._options.snapshot_entries
            or self._bytes >= self._options.snapshot_bytes
        )

    def request(self, applied: int) -> bool:
        """The host asks for a snapshot; True when there is something new to snapshot (the
        request then stands until `take_request`)."""
        if applied <= self.last:
            return False
        self.requested = True
        return True

    def take_request(self, applied: int) -> bool:
        """Whether a requested snapshot should be taken now (the request is consumed)."""
        requested, self.requested = self.requested, False
        return requested and applied > self.last

    def taken(self, index: int) -> int:
        """A snapshot at ``index`` is durable; returns the index to compact the log through
        (keeping the bounded tail of the module docstring)."""
        self.last = index
        keep_from = index
        kept_bytes = 0
        for i, size in reversed(self._applied):
            if i > index:
                continue
            too_many = index - i >= self._options.keep_entries
            if too_many or kept_bytes + size > self._options.keep_bytes:
                break
            kept_bytes += size
            keep_from = i - 1
        while self._applied and self._applied[0][0] <= index:
            self._bytes -= self._applied.popleft()[1]
        return keep_from

    def installed(self, index: int) -> None:
        """A snapshot at ``index`` from the leader replaced the log."""
        self.last = index
        self._applied.clear()
        self._bytes = 0
