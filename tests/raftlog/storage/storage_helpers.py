"""Helpers shared by the storage tests: an oracle that replays WAL records into MemoryStorage,
a state comparison, and a WAL opener that registers the WAL for closing."""

from __future__ import annotations

from collections.abc import Sequence

from raftlog.core.storage import MemoryStorage
from raftlog.storage import (
    ConfRecord,
    DropRecord,
    EntriesRecord,
    GroupLog,
    HardStateRecord,
    Record,
    SnapshotRecord,
    Wal,
    WalOptions,
)


def oracle(records: Sequence[tuple[int, Record]]) -> dict[int, MemoryStorage]:
    """What every group must look like after recovering exactly ``records``.

    Recovery starts the log right after a created snapshot, in that snapshot's configuration,
    so the oracle compacts there and takes it too.
    """
    groups: dict[int, MemoryStorage] = {}
    for group, rec in records:
        if isinstance(rec, DropRecord):
            groups.pop(group, None)
            continue
        ms = groups.setdefault(group, MemoryStorage())
        if isinstance(rec, EntriesRecord):
            ms.append(rec.entries)
        elif isinstance(rec, HardStateRecord):
            ms.set_hard_state(rec.hard_state)
        elif isinstance(rec, ConfRecord):
            ms.set_conf(rec.conf)
        elif isinstance(rec, SnapshotRecord):
            assert not rec.installed, "the oracle only models created snapshots"
            ms.create_snapshot(rec.meta.index, rec.meta.conf, b"")
            ms.compact(rec.meta.index)
            ms.set_conf(rec.meta.conf)  # a restart resumes in the snapshot's configuration
    return groups


def assert_same(log: GroupLog, expected: MemoryStorage) -> None:
    """``log`` describes the same durable state as ``expected``."""
    assert log.initial_state() == expected.initial_state()
    assert log.first_index() == expected.first_index()
    assert log.last_index() == expected.last_index()
    first, last = expected.first_index(), expected.last_index()
    if last >= first:
        assert log.entries(first, last + 1, 1 << 30) == expected.entries(first, last + 1, 1 << 30)
    assert log.term(first - 1) == expected.term(first - 1)
    got, want = log.snapshot().meta, expected.snapshot().meta
    assert (got.index, got.term) == (want.index, want.term)


def make_wal(wals: list[Wal], path: str, **options: int) -> Wal:
    wal = Wal.open(path, WalOptions(**options))
    wals.append(wal)
    return wal
