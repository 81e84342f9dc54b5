"""Frozen snapshots of a node's runtime counters (`MultiRaft.stats`).

Readers (the metrics exporter, status pages, benchmarks) get plain immutable values and never
reach into the runtime's WALs, group drivers or Raft state. Taking a snapshot copies counters
only: it is cheap enough to do on every scrape.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.storage.wal import WalStats

__all__ = ["GroupStats", "PeerLinkStats", "RuntimeStats", "SentStats", "WalStats"]


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One group's counters on this node, with its term and the leader this replica knows."""

    group: int
    term: int
    leader: int
    """The leader's node id as known here (0: none known)."""
    proposals: int
    """Commands proposed on this node."""
    batches: int
    """Raft entries the proposals were packed into."""
    readies: int
    persisted_entries: int
    applied_entries: int
    snapshots: int
    forced_snapshots: int
    """Snapshots taken because the group pinned old WAL segments."""


@dataclass(frozen=True, slots=True)
class PeerLinkStats:
    """The connection to one peer (frames and bytes both ways, drops, reconnects)."""

    peer: int
    frames_sent: int
    bytes_sent: int
    frames_received: int
    dropped_full: int
    """Frames dropped because the peer's send buffer was full."""
    connects: int
    auth_failures: int
    chunked_transfers: int


@dataclass(frozen=True, slots=True)
class SentStats:
    """What this node sent: appends (with the entries and bytes they carried) and flushes."""

    appends: int
    append_entries: int
    append_bytes: int
    flushes: int


@dataclass(frozen=True, slots=True)
class RuntimeStats:
    """A consistent-enough copy of every counter of one node (`MultiRaft.stats`)."""

    node: int
    wals: tuple[WalStats, ...]
    """One per data directory, in ``data_dirs`` order (the index is the ``dir`` label)."""
    groups: tuple[GroupStats, ...]
    """Sorted by group id."""
    peers: tuple[PeerLinkStats, ...]
    """Sorted by peer id."""
    sent: SentStats
