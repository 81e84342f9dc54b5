"""The read side of a group's durable log, as the core sees it, and an in-memory implementation.

The core only *reads* storage: the caller writes to it while carrying out a `Ready` (entries,
hard state, snapshots) and compacts it after taking a snapshot. Contract of every method: it
describes durable (persisted) state only; ``term(first_index() - 1)`` is the snapshot's term.
"""

from __future__ import annotations

from typing import Protocol

from raftlog.core.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from raftlog.errors import Compacted, InvariantViolation, Unavailable


class Storage(Protocol):
    """Read access to a group's persisted log, hard state and latest snapshot."""

    def initial_state(self) -> tuple[HardState, ConfState]:
        """The persisted hard state and the configuration to restart from: the one in force
        at the snapshot point (`SnapshotMeta.conf`). A restarted core applies the entries after
        the snapshot again, configuration changes included (`ConfState.apply` is idempotent
        for repeated steps); a later configuration is tolerated for that reason."""
        ...

    def first_index(self) -> int:
        """Index of the first entry held (snapshot index + 1)."""
        ...

    def last_index(self) -> int:
        """Index of the last entry held (snapshot index when the log is empty)."""
        ...

    def term(self, index: int) -> int:
        """Term of the entry at ``index``; valid for ``first_index() - 1 <= index <= last``.

        Raises `Compacted` below that range and `Unavailable` above it.
        """
        ...

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries in ``[lo, hi)``, at least one if the range is non-empty, stopping before
        ``max_bytes`` is exceeded. Raises `Compacted` / `Unavailable` like `term`."""
        ...

    def snapshot(self) -> Snapshot:
        """The latest persisted snapshot (an empty one at index 0 if none)."""
        ...


class ReadThrough:
    """The read side of `Storage`, each call passed through to the storage in ``self._base``: for a
    log that serves its reads from another one (`raftlog.storage.memory_log.MemoryLog` from the
    `MemoryStorage` its completed writes fill; the node simulator's slowed log from the log it
    wraps). A subclass sets ``_base`` (and lists it in its ``__slots__`` if it has them)."""

    __slots__ = ()
    _base: Storage

    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._base.initial_state()

    def first_index(self) -> int:
        return self._base.first_index()

    def last_index(self) -> int:
        return self._base.last_index()

    def term(self, index: int) -> int:
        return self._base.term(index)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        return self._base.entries(lo, hi, max_bytes)

    def snapshot(self) -> Snapshot:
        return self._base.snapshot()


def bootstrap_snapshot(conf: ConfState) -> Snapshot:
    """The snapshot every founding member of a group starts from: index 1, term 1, ``conf``,
    empty state machine data.

    Putting the initial configuration in a snapshot (rather than only in each founder's memory)
    means a node added later learns the full membership from the snapshot the leader sends it.
    """
    return Snapshot(SnapshotMeta(1, 1, conf), b"")


def limit_size(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The longest prefix of ``entries`` within ``max_bytes`` -- but never fewer than one entry."""
    total = 0
    for i, e in enumerate(entries):
        total += e.size()
        if total > max_bytes and i > 0:
            return entries[:i]
    return entries


class MemoryStorage:
    """`Storage` kept in memory, with the write methods a caller uses while carrying out Readies.

    Used by the simulator and tests; the WAL-backed store implements the same read contract.
    """

    __slots__ = ("_conf", "_entries", "_hard_state", "_snapshot")

    def __init__(self, conf: ConfState | None = None) -> None:
        """Empty storage; with a ``conf`` that has voters, a founding member's storage holding
        `bootstrap_snapshot(conf)`. A node joining an existing group starts with ``conf=None``
        and receives the configuration from the leader's snapshot."""
        self._hard_state = HardState()
        self._snapshot = Snapshot()
        # _entries[0] is a dummy standing for the snapshot point (index, term).
        self._entries: list[Entry] = [Entry(0, 0)]
        self._conf = ConfState()
        if conf is not None and conf.voters:
            self.apply_snapshot(bootstrap_snapshot(conf))

    # -- read side -------------------------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hard_state, self._conf

    def first_index(self) -> int:
        return self._entries[0].index + 1

    def last_index(self) -> int:
        return self._entries[0].index + len(self._entries) - 1

    def term(self, index: int) -> int:
        offset = self._entries[0].index
        if index < offset:
            raise Compacted(f"index {index} is below the snapshot at {offset}")
        if index - offset >= len(self._entries):
            raise Unavailable(f"index {index} is beyond the last index {self.last_index()}")
        return self._entries[index - offset].term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        offset = self._entries[0].index
        if lo <= offset:
            raise Compacted(f"index {lo} is compacted (snapshot at {offset})")
        if hi > self.last_index() + 1:
            raise Unavailable(f"index {hi - 1} is beyond the last index {self.last_index()}")
        return limit_size(self._entries[lo - offset : hi - offset], max_bytes)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # -- write side (used by the caller carrying out a Ready) ------------------------------------
    def set_hard_state(self, hs: HardState) -> None:
        """Record ``hs`` as persisted."""
        self._hard_state = hs

    def set_conf(self, conf: ConfState) -> None:
        """Record the configuration reported by `initial_state` (after a conf change applies)."""
        self._conf = conf

    def append(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """Store ``entries``; the first one replaces the stored entry at its index and all after.

        Entries already compacted into the snapshot are skipped. A gap is a caller bug.
        """
        if not entries:
            return
        offset = self._entries[0].index
        first = entries[0].index
        if first + len(entries) - 1 <= offset:
            return
        if first <= offset:
            entries = list(entries)[offset + 1 - first :]
            first = offset + 1
        if first > self.last_index() + 1:
            raise InvariantViolation(f"gap: appending {first} after last {self.last_index()}")
        del self._entries[first - offset :]
        self._entries.extend(entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Replace everything with ``snap``; older snapshots than the current one are ignored."""
        if snap.meta.index <= self._snapshot.meta.index:
            return
        self._snapshot = snap
        self._entries = [Entry(snap.meta.term, snap.meta.index)]
        self._conf = snap.meta.conf

    def create_snapshot(self, index: int, conf: ConfState, data: bytes) -> Snapshot:
        """Record a snapshot of the state machine at ``index`` (which must be stored)."""
        if index <= self._snapshot.meta.index:
            return self._snapshot
        snap = Snapshot(SnapshotMeta(index, self.term(index), conf), data)
        self._snapshot = snap
        return snap

    def compact(self, index: int) -> None:
        """Drop entries up to and including ``index`` (must be <= the snapshot index)."""
        offset = self._entries[0].index
        if index <= offset:
            return
        if index > self._snapshot.meta.index:
            raise InvariantViolation(f"compact {index} beyond snapshot {self._snapshot.meta.index}")
        term = self.term(index)
        self._entries = [Entry(term, index), *self._entries[index - offset + 1 :]]
