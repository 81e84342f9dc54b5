"""Frozen snapshots of a node's runtime counters (`MultiRaft.stats`).

Readers (the metrics exporter, status pages, benchmarks) get plain immutable values and never
reach into the runtime's WALs, group drivers or Raft state. Taking a snapshot copies counters
only: it is cheap enough to do on every scrape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftlog.storage.walstats import WalStats

if TYPE_CHECKING:
    from raftlog.runtime.group import GroupDriver
    from raftlog.transport.config import PeerStats

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
    quiesced: bool = False
    """Idle: not ticked, no heartbeats (`raftlog.runtime.liveness`)."""


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
    handshake_failures: int = 0
    """Connections to this peer that failed their TLS or secret handshake."""
    protocol: int = 0
    """The peer protocol the connection runs at (0: never connected)."""


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
    refused_connections: int = 0
    """Accepted peer connections refused before the peer was authenticated (`Transport.refused`:
    a failed secret handshake, an unexpected node id; failed TLS handshakes are counted by the
    dialing node, in its `PeerLinkStats.handshake_failures`)."""


def group_stats(gid: int, g: GroupDriver) -> GroupStats:
    """A copy of ``g``'s counters, term and known leader."""
    c = g.counters
    return GroupStats(
        group=gid,
        term=g.raw.raft.term,
        leader=g.leader(),
        proposals=c.proposals,
        batches=c.batches,
        readies=c.readies,
        persisted_entries=c.persisted_entries,
        applied_entries=c.applied_entries,
        snapshots=c.snapshots,
        forced_snapshots=c.forced_snapshots,
        quiesced=g.quiesced,
    )


def peer_link_stats(pid: int, p: PeerStats) -> PeerLinkStats:
    """A copy of one peer link's counters."""
    return PeerLinkStats(
        peer=pid,
        frames_sent=p.frames_sent,
        bytes_sent=p.bytes_sent,
        frames_received=p.frames_received,
        dropped_full=p.dropped_full,
        connects=p.connects,
        auth_failures=p.auth_failures,
        chunked_transfers=p.chunked_transfers,
        handshake_failures=p.handshake_failures,
        protocol=p.protocol,
    )
