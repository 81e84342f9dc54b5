"""Durable storage for raftlog: one write-ahead log per data directory with group commit, and a
per-group view (`GroupLog`) implementing the core's `Storage` protocol from memory.

Record and file formats: docs/architecture.md, section 4. Modules: `record` (pure framing and
codecs), `files` (atomic rename, names, snapshot files), `segments` (what pins a segment, segment
heads), `recovery` (replay and torn tail handling), `wal` (the writer thread), `walstats` (its
options and counters), `logstore` (`GroupLog`), `waldisk` (a directory's WAL as the host's
`LogDisk`: `WalDisk`, `WalDisks`), `memory` (their in-memory twins: `MemoryDisk`, `MemoryDisks`),
`memory_log` (a group's log on a memory disk, `MemoryLog`: `GroupLog`'s twin), `memory_records`
(the records a memory disk holds), `completion` (the futures of durable writes both complete).
"""

from raftlog.storage.files import atomic_write, fsync_dir
from raftlog.storage.logstore import GroupLog
from raftlog.storage.record import (
    ConfRecord,
    DropRecord,
    EntriesRecord,
    HardStateRecord,
    Record,
    RecordType,
    SnapshotRecord,
    decode_record,
    encode_record,
)
from raftlog.storage.recovery import RecoveredGroup, TornTail
from raftlog.storage.wal import Wal
from raftlog.storage.waldisk import WalDisk, WalDisks
from raftlog.storage.walstats import FSYNC_BUCKETS, WalCounters, WalOptions, WalStats

__all__ = [
    "FSYNC_BUCKETS",
    "ConfRecord",
    "DropRecord",
    "EntriesRecord",
    "GroupLog",
    "HardStateRecord",
    "Record",
    "RecordType",
    "RecoveredGroup",
    "SnapshotRecord",
    "TornTail",
    "Wal",
    "WalCounters",
    "WalDisk",
    "WalDisks",
    "WalOptions",
    "WalStats",
    "atomic_write",
    "decode_record",
    "encode_record",
    "fsync_dir",
]
