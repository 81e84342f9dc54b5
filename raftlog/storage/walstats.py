"""A directory's WAL settings (`WalOptions`) and counters (`WalStats`, `WalCounters`, the fsync
latency histogram's `FSYNC_BUCKETS`), shared by `raftlog.storage.wal` and its in-memory twin."""

from __future__ import annotations

import math
from dataclasses import dataclass

from raftlog.storage.record import DEFAULT_MAX_BODY

FSYNC_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    math.inf,
)
"""Upper bounds (seconds, inclusive) of the fsync latency histogram buckets."""


@dataclass(frozen=True, slots=True)
class WalOptions:
    """Tuning of one directory's WAL. Every bound is enforced."""

    segment_bytes: int = 64 << 20
    """A segment is rotated once it holds at least this many bytes."""
    max_record_bytes: int = DEFAULT_MAX_BODY
    """Largest record body accepted (and trusted by recovery)."""
    max_pending_submissions: int = 8192
    """Submissions queued and not yet taken by the writer before `Overloaded` is raised."""
    max_pending_bytes: int = 256 << 20
    """Bytes queued before `Overloaded` (a single submission larger than this is still taken
    when the queue is empty, so that it can make progress)."""
    salvage: bool = False
    """Recovery cuts damage before the tail instead of refusing to open (`raftlog.storage
    .recovery`, ``salvage``): the groups seen before it are marked for repair first
    (`Wal.repairs`), and their host catches them up from other replicas."""


@dataclass(frozen=True, slots=True)
class WalStats:
    """A consistent copy of the WAL's counters (`Wal.stats`)."""

    submissions: int
    records: int
    bytes: int
    writes: int
    """Batches written (one ``writev`` sequence each)."""
    fsyncs: int
    """``fdatasync`` calls for batches (rotation fsyncs are not counted)."""
    fsync_seconds: float
    fsync_latency: tuple[int, ...]
    """Counts of fsyncs per `FSYNC_BUCKETS` bucket (latency <= bound, > previous bound)."""
    max_records_per_write: int
    segments: int
    rotations: int
    segments_deleted: int
    failed: str = ""
    """Why the WAL stopped after an I/O error (`raftlog.errors.DiskFailed`), or empty."""
    failed_errno: int = 0
    fsync_started: float = 0.0
    """``time.monotonic()`` when the fsync in progress began (0: none in progress)."""
    last_fsync_seconds: float = 0.0
    """How long the latest batch fsync took."""

    @property
    def records_per_fsync(self) -> float:
        """Mean records made durable per fsync: the group-commit gain."""
        return self.records / self.fsyncs if self.fsyncs else 0.0


class WalCounters:
    """The mutable counters behind `WalStats`; their owner serialises updates (the WAL writes
    them under its lock, the memory disk on the event loop)."""

    __slots__ = (
        "bytes",
        "failed",
        "failed_errno",
        "fsync_buckets",
        "fsync_seconds",
        "fsync_started",
        "fsyncs",
        "last_fsync_seconds",
        "max_records_per_write",
        "records",
        "rotations",
        "segments_deleted",
        "submissions",
        "writes",
    )

    def __init__(self) -> None:
        self.submissions = 0
        self.records = 0
        self.bytes = 0
        self.writes = 0
        self.fsyncs = 0
        self.fsync_seconds = 0.0
        self.fsync_buckets = [0] * len(FSYNC_BUCKETS)
        self.max_records_per_write = 0
        self.rotations = 0
        self.segments_deleted = 0
        self.failed = ""
        self.failed_errno = 0
        self.fsync_started = 0.0
        self.last_fsync_seconds = 0.0

    def wrote(self, submissions: int, records: int, nbytes: int, fsync: float | None) -> None:
        """A batch was written (and fsynced, taking ``fsync`` seconds, unless None)."""
        self.submissions += submissions
        self.records += records
        self.bytes += nbytes
        self.writes += 1
        self.max_records_per_write = max(self.max_records_per_write, records)
        if fsync is not None:
            self.fsyncs += 1
            self.fsync_seconds += fsync
            self.last_fsync_seconds = fsync
            self.fsync_buckets[next(i for i, b in enumerate(FSYNC_BUCKETS) if fsync <= b)] += 1

    def stats(self, segments: int) -> WalStats:
        """A copy, with ``segments`` live segments."""
        return WalStats(
            submissions=self.submissions,
            records=self.records,
            bytes=self.bytes,
            writes=self.writes,
            fsyncs=self.fsyncs,
            fsync_seconds=self.fsync_seconds,
            fsync_latency=tuple(self.fsync_buckets),
            max_records_per_write=self.max_records_per_write,
            segments=segments,
            rotations=self.rotations,
            segments_deleted=self.segments_deleted,
            failed=self.failed,
            failed_errno=self.failed_errno,
            fsync_started=self.fsync_started,
            last_fsync_seconds=self.last_fsync_seconds,
        )
