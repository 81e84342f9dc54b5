"""The records a `raftlog.storage.memory.MemoryDisk` holds, in the order they were written: a
group's snapshot (installed or taken), a batch of its entries, its hard state, its drop.

They are the in-memory twin of the WAL's records (`raftlog.storage.record`), kept as values
instead of bytes: `raftlog.storage.memory_log.MemoryLog` makes them, the disk replays them onto
its durable images when they are synced. `record_size` is what a record counts for in the
disk's byte counters.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.core.types import Entry, HardState, Snapshot


@dataclass(frozen=True, slots=True)
class MemEntries:
    group: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class MemHardState:
    group: int
    hard_state: HardState


@dataclass(frozen=True, slots=True)
class MemSnapshot:
    group: int
    snapshot: Snapshot
    install: bool
    """Received from a leader (replaces the group's log), or taken here (compacts it)."""


@dataclass(frozen=True, slots=True)
class MemDrop:
    group: int


MemRecord = MemEntries | MemHardState | MemSnapshot | MemDrop


def record_size(rec: MemRecord) -> int:
    """About how many bytes ``rec`` would take on disk (the counters' measure)."""
    if isinstance(rec, MemEntries):
        return sum(e.size() for e in rec.entries)
    if isinstance(rec, MemSnapshot):
        return len(rec.snapshot.data) + 32
    return 32
