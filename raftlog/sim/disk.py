"""`SimDisk`: the durable state of one node in one group, with crash and torn-write semantics.

The disk is an ordered sequence of *records* (a snapshot, a batch of entries, a hard state).
``write`` appends records unsynced; ``sync`` makes everything written so far durable. The durable
prefix is kept folded into an image (snapshot + entries + hard state) -- exactly what replaying
those records in order yields -- so a long run does not keep every record ever written.

A crash (`crash`) keeps the durable image plus a random prefix of the unsynced records; the
record right after that prefix may survive *torn* (present, but failing its checksum). Recovery
(`recover`) replays the surviving records in order, stops at the first torn one and drops it and
everything after it, then makes what is left durable and rebuilds a `MemoryStorage` from it.

Replay semantics of each record, applied to the image:
- `EntriesRecord`: the first entry replaces the stored entry at its index and everything after
  (the `Ready` contract); entries at or below the snapshot are skipped; a gap is a caller bug.
- `SnapshotRecord` with ``install=True`` (a snapshot received from the leader): replaces the
  whole log. With ``install=False`` (a snapshot this node took of its own state machine): entries
  up to its index are compacted away and later ones kept.
- `HardStateRecord`: replaces the hard state.
Snapshots older than the current one are ignored.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from raftlog.core.storage import MemoryStorage
from raftlog.core.types import Entry, HardState, Snapshot
from raftlog.errors import InvariantViolation


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """A snapshot file: received from the leader (``install``) or taken locally."""

    snapshot: Snapshot
    install: bool


@dataclass(frozen=True, slots=True)
class EntriesRecord:
    """A batch of consecutive entries; the first replaces the stored suffix from its index."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class HardStateRecord:
    """The hard state (term, vote, commit)."""

    hard_state: HardState


Record = SnapshotRecord | EntriesRecord | HardStateRecord


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as it lies on disk; ``torn`` means its checksum does not match."""

    record: Record
    torn: bool = False


@dataclass(frozen=True, slots=True)
class DiskImage:
    """A copy of a disk's durable state (`SimDisk.image`), for `SimDisk.rollback`."""

    snapshot: Snapshot
    entries: tuple[Entry, ...]
    hard_state: HardState


@dataclass(frozen=True, slots=True)
class CrashOutcome:
    """What a crash did to the unsynced records: how many survived whole, lost, and torn."""

    kept: int
    lost: int
    torn: bool


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    """What recovery replayed and what it dropped (a torn record and everything after it)."""

    replayed: int
    dropped: int


class SimDisk:
    """One node's durable log for one group. Mutable; owned by the simulation.

    Invariants: the image's entries are contiguous from ``snapshot.meta.index + 1``; durable
    state never shrinks except by a record that legitimately truncates or replaces it.
    """

    __slots__ = ("_entries", "_ghost_base", "_ghost_terms", "_hard", "_pending", "_snap", "crashed")

    def __init__(self, initial: Snapshot | None = None) -> None:
        """A disk holding only ``initial``: a founding member's ``bootstrap_snapshot(conf)``,
        or nothing (None) for a node that joins an existing group later."""
        self._snap = initial if initial is not None else Snapshot()
        self._entries: list[Entry] = []
        self._hard = HardState()
        self._pending: list[StoredRecord] = []
        self.crashed = False
        # What a rollback took away (see `rollback`): still counted by `holds`.
        self._ghost_base = 0
        self._ghost_terms: dict[int, int] = {}

    # -- writing ----------------------------------------------------------------------------------
    def write(self, records: list[Record]) -> None:
        """Append ``records`` after everything written so far; not durable until `sync`."""
        if self.crashed:
            raise InvariantViolation("write to a crashed disk before recovery")
        self._pending.extend(StoredRecord(r) for r in records)

    def sync(self) -> bool:
        """Make every written record durable. Returns True when this removed or replaced a
        durable entry (a conflict truncation or an installed snapshot dropping a suffix)."""
        if self.crashed:
            raise InvariantViolation("sync of a crashed disk before recovery")
        lost = False
        for stored in self._pending:
            lost = self._apply(stored.record) or lost
        self._pending = []
        return lost

    def unsynced(self) -> int:
        """How many written records are not yet durable."""
        return len(self._pending)

    # -- crash and recovery -----------------------------------------------------------------------
    def crash(self, rng: random.Random, torn_probability: float) -> CrashOutcome:
        """Power loss: keep a random prefix of the unsynced records; the next one may be torn."""
        n = len(self._pending)
        kept = rng.randint(0, n)
        survivors = self._pending[:kept]
        torn = kept < n and rng.random() < torn_probability
        if torn:
            survivors.append(StoredRecord(self._pending[kept].record, torn=True))
        self._pending = survivors
        self.crashed = True
        return CrashOutcome(kept=kept, lost=n - kept, torn=torn)

    def tear(self, position: int) -> None:
        """Damage the ``position``-th record of a crashed disk's survivors (fault injection for
        tests: recovery must drop it and everything after it)."""
        if not self.crashed:
            raise InvariantViolation("tear() is for a crashed disk")
        stored = self._pending[position]
        self._pending[position] = StoredRecord(stored.record, torn=True)

    def recover(self) -> tuple[MemoryStorage, RecoveryOutcome]:
        """Replay surviving records up to the first torn one (dropped with all after it), make
        the result durable, and rebuild the read-side storage the core restarts from."""
        replayed = 0
        for stored in self._pending:
            if stored.torn:
                break
            self._apply(stored.record)
            replayed += 1
        dropped = len(self._pending) - replayed
        self._pending = []
        self.crashed = False
        return self.storage(), RecoveryOutcome(replayed, dropped)

    def image(self) -> DiskImage:
        """The durable image as it is now (a backup to `rollback` to later)."""
        return DiskImage(self._snap, tuple(self._entries), self._hard)

    def rollback(self, image: DiskImage) -> int:
        """Restore an earlier durable ``image`` of this crashed disk, as an operator restoring a
        backup would; returns the highest durable index that went missing (0: none).

        The entries lost stay counted by `holds` (as *ghosts*): the node did acknowledge them,
        and the durability check is about the commit rule, which did its job; keeping them lost
        is the recovery rule's job (`raftlog.core.recovery`), judged by the safety checks.
        """
        if not self.crashed:
            raise InvariantViolation("rollback() is for a crashed disk")
        before_base, before = self._snap.meta.index, list(self._entries)
        self._snap = image.snapshot
        self._entries = list(image.entries)
        self._hard = image.hard_state
        self._pending = []
        lost_top = before_base if before_base > self._snap.meta.index else 0
        self._ghost_base = max(self._ghost_base, before_base)
        for e in before:
            self._ghost_terms[e.index] = e.term
            if not self.holds(e.index, e.term, ghosts=False):
                lost_top = e.index
        return lost_top

    def storage(self) -> MemoryStorage:
        """A `MemoryStorage` holding exactly the durable image (the core's view after restart).

        The configuration is the snapshot's; configuration changes in later entries are applied
        again by the core when those entries are applied again.
        """
        ms = MemoryStorage()
        if self._snap.meta.index > 0:
            ms.apply_snapshot(self._snap)
        ms.append(self._entries)
        ms.set_hard_state(self._hard)
        return ms

    # -- durable image ----------------------------------------------------------------------------
    def _apply(self, rec: Record) -> bool:
        if isinstance(rec, HardStateRecord):
            self._hard = rec.hard_state
            return False
        if isinstance(rec, EntriesRecord):
            return self._apply_entries(rec.entries)
        return self._apply_snapshot(rec)

    def _apply_entries(self, entries: tuple[Entry, ...]) -> bool:
        if not entries:
            return False
        base = self._snap.meta.index
        first = entries[0].index
        if first <= base:
            entries = entries[base + 1 - first :]
            if not entries:
                return False
            first = base + 1
        last = base + len(self._entries)
        if first > last + 1:
            raise InvariantViolation(f"disk gap: entries from {first} after last {last}")
        keep = first - base - 1
        lost = keep < len(self._entries)
        del self._entries[keep:]
        self._entries.extend(entries)
        return lost

    def _apply_snapshot(self, rec: SnapshotRecord) -> bool:
        meta = rec.snapshot.meta
        base = self._snap.meta.index
        if meta.index <= base:
            return False
        last = base + len(self._entries)
        if rec.install:
            self._snap = rec.snapshot
            lost = last > meta.index
            self._entries = []
            return lost
        if meta.index > last or self._entries[meta.index - base - 1].term != meta.term:
            raise InvariantViolation(
                f"local snapshot at {meta.index}/{meta.term} does not match the durable log"
            )
        self._snap = rec.snapshot
        del self._entries[: meta.index - base]
        return False

    def snapshot(self) -> Snapshot:
        """The durable snapshot (an empty one at index 0 when there is none)."""
        return self._snap

    def hard_state(self) -> HardState:
        """The durable hard state."""
        return self._hard

    def last_index(self) -> int:
        """The last durable entry's index (the snapshot's when the durable log is empty)."""
        return self._snap.meta.index + len(self._entries)

    def entries(self) -> tuple[Entry, ...]:
        """The durable entries after the snapshot."""
        return tuple(self._entries)

    def holds(self, index: int, term: int, *, ghosts: bool = True) -> bool:
        """Whether the entry (index, term) is durable here, as an entry or under the snapshot
        (or was, before a `rollback`, unless ``ghosts`` is False)."""
        if ghosts and (1 <= index <= self._ghost_base or self._ghost_terms.get(index) == term):
            return True
        base = self._snap.meta.index
        if index <= base:
            return index >= 1
        offset = index - base - 1
        return offset < len(self._entries) and self._entries[offset].term == term
