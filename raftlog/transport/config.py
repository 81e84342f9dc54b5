"""The peer transport's settings (`TransportConfig`) and its counters per peer (`PeerStats`)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from raftlog.transport.codec import DEFAULT_MAX_FRAME
from raftlog.transport.protocol import LEGACY_RANGE, ProtocolRange


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """Limits and timings of the peer transport."""

    max_frame: int = DEFAULT_MAX_FRAME
    send_buffer_bytes: int = 64 << 20
    send_buffer_frames: int = 65536
    connect_timeout: float = 2.0
    handshake_timeout: float = 2.0
    backoff_initial: float = 0.05
    backoff_max: float = 0.5
    """Longest wait between dials of an unreachable peer. Only the smaller id dials, so a
    restarted node with a larger id waits for this to be connected, and it votes only once its
    peers answered (`raftlog.core.recovery`): kept well under an election timeout."""
    chunk_bytes: int = 4 << 20
    """Frames with larger bodies (snapshots) go in pieces of this size, interleaved with the
    peer's other traffic, so a big transfer neither hits the frame limit nor stalls beats."""
    max_chunked_transfers: int = 4
    """Chunked frames queued per peer; more are refused (the caller retries later)."""
    max_reassembly_bytes: int = 1 << 30
    """Largest chunked frame a peer may send us."""
    resume_seconds: float = 60.0
    """Chunked frames queued for a peer stay this long after its connection dropped, to resume
    on the next one; after that they are dropped (Raft sends a snapshot again when needed)."""
    server_ssl: ssl.SSLContext | None = None
    """TLS for accepted connections (None: plain TCP). Set with ``client_ssl``; the context
    decides whether a client certificate is required (``verify_mode``)."""
    client_ssl: ssl.SSLContext | None = None
    """TLS for dialed connections (None: plain TCP). Set with ``server_ssl``."""
    protocols: ProtocolRange = LEGACY_RANGE
    """The peer protocols this node speaks; a connection runs at the highest both sides speak
    (`raftlog.transport.protocol`, negotiated in the handshake)."""

    @property
    def tls(self) -> bool:
        """Peer connections are TLS."""
        return self.server_ssl is not None


@dataclass(slots=True)
class PeerStats:
    """Counters per peer (mutable; read by the metrics exporter)."""

    frames_sent: int = 0
    bytes_sent: int = 0
    frames_received: int = 0
    dropped_full: int = 0
    connects: int = 0
    auth_failures: int = 0
    """Secret handshakes this peer failed (either side)."""
    handshake_failures: int = 0
    """Connections to this peer that failed their handshake (TLS or secret) after the TCP
    connect succeeded; refusals of connections from it, before it named itself, are counted in
    `Transport.refused` instead."""
    chunked_transfers: int = 0
    protocol: int = 0
    """The peer protocol the current (or last) connection runs at (0: never connected)."""
