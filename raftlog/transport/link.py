"""`PeerLink`: the transport's state for one remote node (its outbound buffer, chunked frames,
current connection and counters), used by `raftlog.transport.peer.Transport`."""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from raftlog.transport.address import Address
from raftlog.transport.codec import (
    FRAME_HEADER,
    Chunk,
    FrameKind,
    encode_chunk,
    frame_header,
)
from raftlog.transport.config import PeerStats, TransportConfig
from raftlog.transport.resume import BulkQueue, Reassembly, encode_state

log = logging.getLogger("raftlog.transport")

MAX_REASONS = 8
"""Distinct failure reasons logged per peer or host until it connects again."""


class PeerLink:
    """What this node keeps for one remote node: the bounded buffer of frames waiting to go,
    the chunked frames (sent between them, resumed after a reconnect), the current connection's
    writer, the tasks serving the peer, and the handshake failures seen since it last
    connected (each reason logged once)."""

    def __init__(self, node_id: int, address: Address, cfg: TransportConfig) -> None:
        self.id = node_id
        self.address = address
        self.cfg = cfg
        # Frames as (header, body) pairs, flattened: bodies are sent without being copied.
        self.buffer: deque[bytes] = deque()
        self.buffered_bytes = 0
        self.wakeup = asyncio.Event()
        self.writer: asyncio.StreamWriter | None = None
        self.connected = asyncio.Event()
        self.stats = PeerStats()
        # Chunked frames waiting to go (each a list of its remaining chunks), sent one after
        # another, one chunk per writer turn after the regular frames.
        self.bulk = BulkQueue(cfg.max_chunked_transfers)
        self.reassembly = Reassembly(cfg.max_reassembly_bytes)
        self.tasks: set[asyncio.Task[None]] = set()
        self.failures: set[str] = set()
        """Why connection attempts to this peer failed since the last one that succeeded."""

    def note_failure(self, reason: str) -> None:
        """Count a failed handshake; log it as a warning the first time this reason is seen
        since the peer was last connected (a peer refused on every redial is logged once, not
        twice a second; a few distinct reasons are each logged once)."""
        self.stats.handshake_failures += 1
        if reason in self.failures or len(self.failures) >= MAX_REASONS:
            log.debug("handshake with node %d failed again: %s", self.id, reason)
            return
        self.failures.add(reason)
        log.warning(
            "handshake with node %d failed: %s",
            self.id,
            reason,
            extra={"event": "peer_handshake_failed"},
        )

    def note_success(self) -> None:
        if self.failures:
            log.warning("handshake with node %d succeeded again", self.id)
            self.failures.clear()

    def enqueue_bulk(self, chunks: list[Chunk]) -> bool:
        if not self.bulk.add(chunks):
            self.stats.dropped_full += 1
            return False
        self.stats.chunked_transfers += 1
        self.wakeup.set()
        return True

    def next_bulk_frame(self) -> list[bytes]:
        """Header and body of the next chunk frame (empty when nothing may go now)."""
        c = self.bulk.next_chunk()
        if c is None:
            return []
        body = encode_chunk(c)
        return [frame_header(FrameKind.CHUNK, len(body)), body]

    def send_state(self, connect: bool) -> None:
        """Tell the peer what this node holds of its chunked frames (ahead of other frames)."""
        body = encode_state(self.reassembly.state(connect))
        self.buffer.appendleft(body)
        self.buffer.appendleft(frame_header(FrameKind.CHUNK_STATE, len(body)))
        self.buffered_bytes += len(body) + FRAME_HEADER.size
        self.wakeup.set()

    def enqueue(self, header: bytes, body: bytes) -> bool:
        size = len(header) + len(body)
        if (
            self.buffered_bytes + size > self.cfg.send_buffer_bytes
            or len(self.buffer) // 2 >= self.cfg.send_buffer_frames
        ):
            self.stats.dropped_full += 1
            return False
        self.buffer.append(header)
        self.buffer.append(body)
        self.buffered_bytes += size
        self.wakeup.set()
        return True

    def drain_buffer(self, limit: int) -> list[bytes]:
        out: list[bytes] = []
        size = 0
        while self.buffer and (size < limit or not out):
            data = self.buffer.popleft()
            self.buffered_bytes -= len(data)
            size += len(data)
            out.append(data)
        return out
