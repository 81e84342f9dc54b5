"""A group's log as the core sees it: durable entries in `Storage` plus not-yet-persisted ones.

Layout (indexes grow to the right)::

    storage: [first_index ........ storage.last_index]
    unstable:                 [offset ............... last_index]     (may overlap storage)

Entries in ``unstable`` win over storage where they overlap: they are newer (a conflict replaced
them) and will overwrite storage when persisted. ``committed`` and ``applied`` are monotonic;
``applied <= committed`` and ``committed <= last_index`` always hold.
"""

from __future__ import annotations

from raftlog.core.storage import Storage, limit_size
from raftlog.core.types import Entry, Snapshot
from raftlog.errors import Compacted, InvariantViolation, Unavailable


class RaftLog:
    """Log bookkeeping for one RawNode. Not thread-safe; owned by its RawNode."""

    __slots__ = (
        "applied",
        "committed",
        "offset",
        "pending_snapshot",
        "storage",
        "unstable",
        "unstable_in_progress",
    )

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.unstable: list[Entry] = []
        self.offset = storage.last_index() + 1
        self.pending_snapshot: Snapshot | None = None
        # unstable entries up to this index have been handed out in a Ready not yet advanced.
        self.unstable_in_progress = self.offset - 1
        first = storage.first_index()
        self.committed = first - 1
        self.applied = first - 1

    # -- positions ---------------------------------------------------------------------------------
    def first_index(self) -> int:
        """First index whose entry is available (pending snapshot index + 1 when one is set)."""
        if self.pending_snapshot is not None:
            return self.pending_snapshot.meta.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        """Index of the last entry, stable or not (snapshot index when the log is empty)."""
        if self.unstable:
            return self.offset + len(self.unstable) - 1
        if self.pending_snapshot is not None:
            return self.pending_snapshot.meta.index
        return self.storage.last_index()

    def last_term(self) -> int:
        """Term of the last entry."""
        return self.term(self.last_index())

    def term(self, index: int) -> int:
        """Term at ``index``; 0 when ``index`` is compacted or beyond the end (no entry known)."""
        if self.unstable and self.offset <= index <= self.offset + len(self.unstable) - 1:
            return self.unstable[index - self.offset].term
        snap = self.pending_snapshot
        if snap is not None:
            if index == snap.meta.index:
                return snap.meta.term
            return 0
        if index >= self.offset:
            return 0
        try:
            return self.storage.term(index)
        except (Compacted, Unavailable):
            return 0

    def match_term(self, index: int, term: int) -> bool:
        """Whether the entry at ``index`` has ``term`` (index 0 / term 0 always matches)."""
        if index == 0:
            return term == 0
        t = self.term(index)
        return t != 0 and t == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's election restriction: is a log ending at (last_index, last_term) at least as
        up to date as ours?"""
        my_term = self.last_term()
        return last_term > my_term or (last_term == my_term and last_index >= self.last_index())

    # -- reading ---------------------------------------------------------------------------------
    def slice(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries in ``[lo, hi)`` limited to ``max_bytes`` (at least one when non-empty).

        Raises `Compacted` when ``lo`` is below `first_index` (the caller should send a snapshot).
        """
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise Compacted(f"index {lo} is compacted")
        if hi > self.last_index() + 1:
            raise InvariantViolation(f"slice [{lo}, {hi}) beyond last index {self.last_index()}")
        out: list[Entry] = []
        if lo < self.offset:
            out = self.storage.entries(lo, min(hi, self.offset), max_bytes)
            if len(out) < min(hi, self.offset) - lo:
                return out
        if hi > self.offset:
            start = max(lo, self.offset)
            out.extend(self.unstable[start - self.offset : hi - self.offset])
        return limit_size(out, max_bytes)

    def entries_from(self, lo: int, max_bytes: int) -> list[Entry]:
        """Entries from ``lo`` to the end, limited to ``max_bytes``."""
        return self.slice(lo, self.last_index() + 1, max_bytes)

    # -- writing ---------------------------------------------------------------------------------
    def append(self, entries: list[Entry] | tuple[Entry, ...]) -> int:
        """Append ``entries`` (the first may replace a suffix); returns the new last index.

        The caller guarantees that replacing is legitimate (a term conflict was found) and never
        replaces committed entries; a violation raises `InvariantViolation`.
        """
        if not entries:
            return self.last_index()
        first = entries[0].index
        if first - 1 < self.committed:
            raise InvariantViolation(
                f"append at {first} would overwrite committed entries (commit {self.committed})"
            )
        if first > self.last_index() + 1:
            raise InvariantViolation(f"append at {first} leaves a gap after {self.last_index()}")
        if first == self.offset + len(self.unstable):
            self.unstable.extend(entries)
        elif first <= self.offset:
            # Replaces entries that may already be in storage: restart unstable here. The
            # replacement is persisted by a later Ready and overwrites storage's suffix.
            self.offset = first
            self.unstable = list(entries)
            self.unstable_in_progress = min(self.unstable_in_progress, first - 1)
        else:
            del self.unstable[first - self.offset :]
            self.unstable.extend(entries)
            self.unstable_in_progress = min(self.unstable_in_progress, first - 1)
        return self.last_index()

    def find_conflict(self, entries: tuple[Entry, ...]) -> int:
        """Index of the first entry in ``entries`` whose term differs from ours, or of the first
        entry beyond our log; 0 when every entry is already present (a stale or duplicate
        append)."""
        for e in entries:
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest ``i <= index`` whose term is ``<= term``, and that term.

        Used for fast back-off: everything after the returned index is known not to match.
        """
        index = min(index, self.last_index())
        while index > 0:
            t = self.term(index)
            if t == 0 and index < self.first_index():
                # Compacted: everything at or below the snapshot is committed, so it matches.
                return index, 0
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    def maybe_append(
        self, index: int, log_term: int, commit: int, entries: tuple[Entry, ...]
    ) -> int | None:
        """Handle an append whose entries follow (index, log_term).

        Returns the last index now matching the leader (``index + len(entries)``), or None when
        (index, log_term) does not match our log. Truncates only on a real term conflict.
        """
        if not self.match_term(index, log_term):
            return None
        last_new = index + len(entries)
        conflict = self.find_conflict(entries)
        if conflict != 0:
            if conflict <= self.committed:
                raise InvariantViolation(
                    f"entry {conflict} conflicts with committed entries (commit {self.committed})"
                )
            self.append(entries[conflict - index - 1 :])
        self.commit_to(min(commit, last_new))
        return last_new

    def commit_to(self, index: int) -> None:
        """Raise the commit index to ``index`` (never lowers it)."""
        if index > self.committed:
            if index > self.last_index():
                raise InvariantViolation(f"commit {index} beyond last index {self.last_index()}")
            self.committed = index

    def restore(self, snap: Snapshot) -> None:
        """Replace the whole log with ``snap`` (installing a snapshot from the leader)."""
        self.pending_snapshot = snap
        self.committed = snap.meta.index
        self.offset = snap.meta.index + 1
        self.unstable = []
        self.unstable_in_progress = snap.meta.index

    # -- persistence bookkeeping -----------------------------------------------------------------
    def stable_last(self) -> int:
        """The last index known durable (persisted and not superseded by a replacement)."""
        return self.offset - 1

    def unpersisted(self) -> list[Entry]:
        """Unstable entries not yet handed out in a Ready."""
        return self.unstable[self.unstable_in_progress + 1 - self.offset :]

    def mark_in_progress(self, entries: tuple[Entry, ...]) -> None:
        """Record that ``entries`` were handed out in a Ready for persisting."""
        if entries:
            self.unstable_in_progress = entries[-1].index

    def stable_to(self, index: int, term: int) -> None:
        """Entries up to ``index`` (whose term was ``term``) are now durable.

        Ignored when a conflict replaced that entry in the meantime: the replacement is still
        unstable and will be persisted by a later Ready.
        """
        if index < self.offset:
            return
        if self.term(index) != term:
            return
        del self.unstable[: index + 1 - self.offset]
        self.offset = index + 1
        self.unstable_in_progress = max(self.unstable_in_progress, index)

    def snapshot_persisted(self, snap: Snapshot) -> None:
        """The pending snapshot ``snap`` is now durable in storage."""
        if (
            self.pending_snapshot is not None
            and self.pending_snapshot.meta.index == snap.meta.index
        ):
            self.pending_snapshot = None

    def next_committed(self, max_bytes: int) -> list[Entry]:
        """Committed, durable entries not yet applied (bounded by ``max_bytes``)."""
        hi = min(self.committed, self.stable_last())
        if self.pending_snapshot is not None or self.applied + 1 > hi:
            return []
        return self.slice(self.applied + 1, hi + 1, max_bytes)

    def applied_to(self, index: int) -> None:
        """Entries up to ``index`` have been applied."""
        if index > self.committed or index < self.applied:
            raise InvariantViolation(
                f"applied_to({index}) outside [{self.applied}, {self.committed}]"
            )
        self.applied = index
