"""Resumable chunked transfers (snapshots shipped to a follower), both ends. Pure: no sockets.

A frame body larger than `TransportConfig.chunk_bytes` travels as ``CHUNK`` frames
(`raftlog.transport.codec.split_chunks`). A dropped connection does not start it over:

* the receiver (`Reassembly`) keeps the pieces it holds across connections, and on every new
  connection first tells the sender its `ChunkState`: the frame it holds part of (by its
  `FrameKey`: piece count, length and CRC-32 of the whole body) and how many pieces, plus the
  frames it completed lately. It sends one more state each time it completes a frame;
* the sender (`BulkQueue`) keeps each frame until a state lists it as completed; on a new
  connection it sends nothing chunked before the receiver's state arrived, then resumes each
  frame at the first piece the receiver lacks (0 when it holds none of it).

So a transfer cut mid-way ships about its size once in total, plus what was in flight when the
link dropped. The same body offered again while its earlier copy is still queued (Raft sends the
same snapshot again after a timeout) is not queued twice.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from dataclasses import dataclass

from raftlog.transport.codec import Chunk, CodecError, FrameKind

_KEY = struct.Struct(">IQI")
_STATE = struct.Struct(">BIB")
DONE_REMEMBERED = 8
"""Completed frames a receiver lists in its state (a sender keeps at most a few queued)."""


@dataclass(frozen=True, slots=True)
class FrameKey:
    """Identifies a chunked frame's content, whichever transfer carries it."""

    count: int
    total: int
    crc: int

    @staticmethod
    def of(c: Chunk) -> FrameKey:
        return FrameKey(c.count, c.total, c.crc)


@dataclass(frozen=True, slots=True)
class ChunkState:
    """What a receiver holds of a peer's chunked frames: ``have`` pieces of ``partial`` (None:
    nothing), and the frames it completed lately. ``connect``: sent at the start of a
    connection (the sender resumes from it) rather than after completing a frame."""

    connect: bool
    partial: FrameKey | None
    have: int
    done: tuple[FrameKey, ...]


def encode_state(s: ChunkState) -> bytes:
    """Body of a ``CHUNK_STATE`` frame."""
    out = bytearray(_STATE.pack(int(s.connect), s.have, len(s.done)))
    p = s.partial or FrameKey(0, 0, 0)
    out += _KEY.pack(p.count, p.total, p.crc)
    for k in s.done:
        out += _KEY.pack(k.count, k.total, k.crc)
    return bytes(out)


def decode_state(body: bytes | memoryview) -> ChunkState:
    view = memoryview(body)
    if len(view) < _STATE.size + _KEY.size:
        raise CodecError("short chunk state")
    connect, have, n = _STATE.unpack_from(view, 0)
    if len(view) != _STATE.size + _KEY.size * (n + 1):
        raise CodecError("chunk state of the wrong length")
    keys = [FrameKey(*_KEY.unpack_from(view, _STATE.size + i * _KEY.size)) for i in range(n + 1)]
    partial = keys[0] if keys[0].count else None
    return ChunkState(bool(connect), partial, have if partial else 0, tuple(keys[1:]))


class Reassembly:
    """Puts one peer's chunked frames back together, one frame at a time (a sender sends a
    frame's pieces in order), keeping the pieces across connections. Bounded: a frame
    announcing more than ``max_bytes`` is refused; a new frame (another key, piece 0) replaces
    an unfinished one."""

    __slots__ = ("_done", "_key", "_parts", "_received", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._key: FrameKey | None = None
        self._parts: list[bytes] = []
        self._received = 0
        self._done: deque[FrameKey] = deque(maxlen=DONE_REMEMBERED)

    def add(self, c: Chunk) -> tuple[FrameKind, bytes] | None:
        """Take one piece; the whole frame ``(kind, body)`` once its last piece arrived. A
        piece already held (sent again) is ignored; a piece beyond the next one raises."""
        if c.total > self.max_bytes:
            raise CodecError(f"chunked frame of {c.total} bytes exceeds {self.max_bytes}")
        key = FrameKey.of(c)
        if key != self._key:
            if c.index != 0:
                return None  # a piece of a frame whose start this node does not hold
            self._key, self._parts, self._received = key, [], 0
        if c.index < len(self._parts):
            return None
        if c.index > len(self._parts):
            raise CodecError("chunks out of order")
        self._parts.append(c.data)
        self._received += len(c.data)
        if self._received > c.total:
            raise CodecError("chunked frame longer than announced")
        if c.index + 1 < c.count:
            return None
        body = b"".join(self._parts)
        self.reset()
        if len(body) != c.total or zlib.crc32(body) != c.crc:
            raise CodecError("chunked frame fails its length or CRC check")
        self._done.append(key)
        return c.kind, body

    def reset(self) -> None:
        """Forget the unfinished frame."""
        self._key, self._parts, self._received = None, [], 0

    def state(self, connect: bool) -> ChunkState:
        return ChunkState(connect, self._key, len(self._parts), tuple(self._done))


class _Outgoing:
    __slots__ = ("chunks", "key", "next")

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = chunks
        self.key = FrameKey.of(chunks[0])
        self.next = 0


class BulkQueue:
    """A sender's chunked frames for one peer, kept until the receiver confirms them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._frames: deque[_Outgoing] = deque()
        self.resumed = False
        """The receiver's state arrived on the current connection: pieces may go."""
        self.resumes = 0
        """Frames resumed past their first piece after a reconnect."""

    def __len__(self) -> int:
        return len(self._frames)

    def add(self, chunks: list[Chunk]) -> bool:
        """Queue a frame's pieces; False when ``limit`` frames are queued. The same body queued
        already is not queued again (True: it is on its way)."""
        key = FrameKey.of(chunks[0])
        if any(f.key == key for f in self._frames):
            return True
        if len(self._frames) >= self.limit:
            return False
        self._frames.append(_Outgoing(chunks))
        return True

    def pending(self) -> bool:
        """Whether a piece may be sent now."""
        return self.resumed and any(f.next < len(f.chunks) for f in self._frames)

    def next_chunk(self) -> Chunk | None:
        """The next piece to send (frames in order), None when none may go now."""
        if not self.resumed:
            return None
        for f in self._frames:
            if f.next < len(f.chunks):
                f.next += 1
                return f.chunks[f.next - 1]
        return None

    def disconnected(self) -> None:
        """The connection dropped: nothing goes until the receiver's state on the next one."""
        self.resumed = False

    def on_state(self, s: ChunkState) -> None:
        """The receiver's state: drop completed frames; at a connection's start, resume each
        frame at the first piece the receiver lacks."""
        done = set(s.done)
        self._frames = deque(f for f in self._frames if f.key not in done)
        if not s.connect:
            return
        for f in self._frames:
            f.next = s.have if f.key == s.partial else 0
            self.resumes += f.next > 0
        # The frame the receiver holds part of goes first: another one would replace it.
        self._frames = deque(sorted(self._frames, key=lambda f: f.key != s.partial))
        self.resumed = True

    def clear(self) -> None:
        self._frames.clear()
