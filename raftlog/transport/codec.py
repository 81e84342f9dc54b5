"""Binary encoding of peer traffic (pure: no sockets). Never pickle: every byte is parsed.

Frame on the wire: ``[u32 length][u8 kind][body]`` where ``length`` counts ``kind`` + ``body``.
Frames larger than the configured limit are refused before their body is read.

Kinds:
- ``HELLO``      node id + nonce (the connecting side introduces itself)
- ``CHALLENGE``  nonce (the accepting side's challenge) + HMAC of the client's nonce
- ``AUTH``       HMAC of the server's nonce (proves the client knows the cluster secret)
- ``RAFT``       a batch of (group id, `Message`) pairs
- ``BEATS``      coalesced heartbeats: (group, term, commit) for every group the sender leads
- ``BEAT_ACKS``  coalesced heartbeat answers: (group, term)
- ``CALL`` / ``REPLY``  request id + opaque payload (forwarded client calls)
- ``CHUNK``      one piece of a large frame (snapshots) sent in pieces between other traffic:
                 transfer id, inner kind, piece index and count, total length, CRC-32 of the
                 whole body; the receiver reassembles, checks the CRC and delivers the inner frame
- ``CHUNK_STATE`` the pieces of chunked frames a receiver holds, so that a transfer resumes
                 after a reconnect (`raftlog.transport.resume`)
- ``QUIESCE``    like ``BEATS``: the last heartbeat of idle groups (`raftlog.runtime.liveness`)

Versions: the frame layout is version 1 (`FRAME_LAYOUT_VERSION`, implicit: no byte carries it;
the handshake is `raftlog.transport.peer`'s). A later release's frame is recognised by a kind
beyond `FrameKind` (directly or inside a ``CHUNK``): `parse_header` and `decode_chunk` raise
`NewerFrame` (a `CodecError`, so the connection is dropped and logged naming the peer's node
id) saying it is a newer release's kind and which kinds this release reads.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

from raftlog.core.types import (
    ConfState,
    Entry,
    EntryKind,
    Message,
    MsgType,
    Snapshot,
    SnapshotMeta,
)
from raftlog.errors import RaftError

FRAME_HEADER = struct.Struct(">IB")
_MSG = struct.Struct(">QBQQQQQQBQBIBQ")
_ENTRY = struct.Struct(">QQBI")
_SNAP = struct.Struct(">QQII")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_BEAT = struct.Struct(">QQQ")
_BEAT_ACK = struct.Struct(">QQ")
_CALL = struct.Struct(">QB")
_CHUNK = struct.Struct(">QBIIQI")
_PONG = struct.Struct(">Qq")

DEFAULT_MAX_FRAME = 64 << 20
FRAME_LAYOUT_VERSION = 1
"""The peer frame layout described above; implicit (see the module docstring)."""


class FrameKind(IntEnum):
    HELLO = 1
    CHALLENGE = 2
    AUTH = 3
    RAFT = 4
    BEATS = 5
    BEAT_ACKS = 6
    CALL = 7
    REPLY = 8
    CHUNK = 9
    QUIESCE = 10
    """A ``BEATS`` body: each group's last heartbeat before its leader stops ticking it."""
    CHUNK_STATE = 11
    """What the sender holds of the peer's chunked frames (`raftlog.transport.resume`)."""


class CodecError(RaftError):
    """A frame could not be decoded: the peer is broken or hostile; drop the connection."""

    code = "CodecError"


class NewerFrame(CodecError):
    """A frame of a kind this release does not know: a newer release's (see the module
    docstring). ``kind`` is the byte found."""

    code = "NewerFrame"

    def __init__(self, kind: int, inner: bool = False) -> None:
        what = "inner frame kind" if inner else "frame kind"
        super().__init__(
            f"{what} {kind} is from a newer release than this one, which reads frame kinds "
            f"{min(FrameKind)}-{max(FrameKind)}"
        )
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Beat:
    """One group's heartbeat inside a coalesced ``BEATS`` frame."""

    group: int
    term: int
    commit: int


@dataclass(frozen=True, slots=True)
class BeatAck:
    """One group's heartbeat answer inside a coalesced ``BEAT_ACKS`` frame."""

    group: int
    term: int


def frame(kind: FrameKind, body: bytes | bytearray | memoryview) -> bytes:
    """A complete frame: header + body."""
    return frame_header(kind, len(body)) + bytes(body)


def frame_header(kind: FrameKind, body_length: int) -> bytes:
    """The 5-byte header of a frame whose body has ``body_length`` bytes (send the body after
    it as is: large bodies need not be copied)."""
    return FRAME_HEADER.pack(body_length + 1, int(kind))


def parse_header(header: bytes, max_frame: int) -> tuple[FrameKind, int]:
    """``(kind, body length)`` from the 5 header bytes; refuses oversize or unknown frames."""
    length, kind = FRAME_HEADER.unpack(header)
    if length < 1 or length > max_frame:
        raise CodecError(f"frame length {length} outside [1, {max_frame}]")
    try:
        return FrameKind(kind), length - 1
    except ValueError:
        raise NewerFrame(kind) from None


# -- raft messages -------------------------------------------------------------------------------
def _encode_ids(out: bytearray, ids: tuple[int, ...]) -> None:
    out += _U32.pack(len(ids))
    for i in ids:
        out += _U64.pack(i)


def encode_messages(batch: list[tuple[int, Message]] | tuple[tuple[int, Message], ...]) -> bytes:
    """Body of a ``RAFT`` frame carrying ``(group, message)`` pairs."""
    out = bytearray(_U32.pack(len(batch)))
    for group, m in batch:
        out += _MSG.pack(
            group,
            int(m.type),
            m.to,
            m.frm,
            m.term,
            m.log_term,
            m.index,
            m.commit,
            int(m.reject),
            m.reject_hint,
            int(m.transfer),
            len(m.entries),
            int(m.snapshot is not None),
            m.epoch,
        )
        for e in m.entries:
            out += _ENTRY.pack(e.term, e.index, int(e.kind), len(e.data))
            out += e.data
        if m.snapshot is not None:
            s = m.snapshot
            out += _SNAP.pack(s.meta.index, s.meta.term, len(s.meta.conf.voters), len(s.data))
            for v in s.meta.conf.voters:
                out += _U64.pack(v)
            _encode_ids(out, s.meta.conf.learners)
            out += s.data
    return bytes(out)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple[int, ...]:
        end = self.pos + st.size
        if end > len(self.buf):
            raise CodecError("truncated frame body")
        vals = st.unpack_from(self.buf, self.pos)
        self.pos = end
        return vals

    def raw(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise CodecError("truncated frame body")
        data = bytes(self.buf[self.pos : end])
        self.pos = end
        return data

    def ids(self, n: int) -> tuple[int, ...]:
        if n > (len(self.buf) - self.pos) // 8:
            raise CodecError("id list longer than the frame")
        return tuple(self.take(_U64)[0] for _ in range(n))

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise CodecError(f"{len(self.buf) - self.pos} trailing bytes in frame")


def decode_messages(body: bytes | memoryview) -> list[tuple[int, Message]]:
    """Inverse of `encode_messages`; raises `CodecError` on any malformed input."""
    r = _Reader(body)
    (count,) = r.take(_U32)
    if count > len(body) // _MSG.size:
        raise CodecError("message count larger than the frame")
    out: list[tuple[int, Message]] = []
    try:
        for _ in range(count):
            (
                group,
                mtype,
                to,
                frm,
                term,
                log_term,
                index,
                commit,
                reject,
                hint,
                transfer,
                n_entries,
                has_snap,
                epoch,
            ) = r.take(_MSG)
            if n_entries > (len(body) - r.pos) // _ENTRY.size:
                raise CodecError("entry count larger than the frame")
            entries = []
            for _ in range(n_entries):
                eterm, eindex, kind, size = r.take(_ENTRY)
                entries.append(Entry(eterm, eindex, EntryKind(kind), r.raw(size)))
            snapshot = None
            if has_snap:
                sindex, sterm, n_voters, size = r.take(_SNAP)
                voters = r.ids(n_voters)
                learners = r.ids(r.take(_U32)[0])
                data = r.raw(size)
                snapshot = Snapshot(SnapshotMeta(sindex, sterm, ConfState(voters, learners)), data)
            msg = Message(
                MsgType(mtype),
                to=to,
                frm=frm,
                term=term,
                log_term=log_term,
                index=index,
                entries=tuple(entries),
                commit=commit,
                reject=bool(reject),
                reject_hint=hint,
                snapshot=snapshot,
                transfer=bool(transfer),
                epoch=epoch,
            )
            out.append((group, msg))
    except ValueError as exc:  # unknown enum values
        raise CodecError(str(exc)) from None
    r.done()
    return out


# -- coalesced heartbeats ------------------------------------------------------------------------
def _encode_rows(st: struct.Struct, rows: list[tuple[int, ...]]) -> bytes:
    """A ``u32`` count, then each row packed by ``st`` (the coalesced heartbeat bodies)."""
    out = bytearray(_U32.pack(len(rows)))
    for row in rows:
        out += st.pack(*row)
    return bytes(out)


def _decode_rows(body: bytes | memoryview, st: struct.Struct) -> list[tuple[int, ...]]:
    """The rows `_encode_rows` wrote (a count beyond what the body holds is refused without
    allocating for it)."""
    r = _Reader(body)
    (n,) = r.take(_U32)
    rows = [r.take(st) for _ in range(min(n, len(body) // st.size + 1))]
    r.done()
    return rows


def encode_beats(beats: list[Beat]) -> bytes:
    """Body of a ``BEATS`` frame."""
    return _encode_rows(_BEAT, [(b.group, b.term, b.commit) for b in beats])


def decode_beats(body: bytes | memoryview) -> list[Beat]:
    return [Beat(*row) for row in _decode_rows(body, _BEAT)]


def encode_beat_acks(acks: list[BeatAck]) -> bytes:
    """Body of a ``BEAT_ACKS`` frame."""
    return _encode_rows(_BEAT_ACK, [(a.group, a.term) for a in acks])


def decode_beat_acks(body: bytes | memoryview) -> list[BeatAck]:
    return [BeatAck(*row) for row in _decode_rows(body, _BEAT_ACK)]


# -- clock probes -------------------------------------------------------------------------------
# A probe travels as an ordinary CALL frame whose payload starts with `CLOCK_PROBE` (0xc1 is
# never valid MessagePack), its answer as the REPLY to that call id: a node that predates the
# probes hands the payload to its call handler, which refuses it with an error reply, so a
# mixed-version cluster (a rolling upgrade) keeps its connections.
CLOCK_PROBE = b"\xc1clk"
PROBE_CALL_BIT = 1 << 63
"""Set in the call id of a probe: its reply goes to the clock reader, not to a waiting call."""


def is_clock_probe(payload: bytes | memoryview) -> bool:
    return bytes(payload[: len(CLOCK_PROBE)]) == CLOCK_PROBE


def encode_clock_ping(seq: int) -> bytes:
    """Payload of a probe call: the marker and the probe's sequence number."""
    return CLOCK_PROBE + _U64.pack(seq)


def decode_clock_ping(body: bytes | memoryview) -> int:
    if not is_clock_probe(body):
        raise CodecError("not a clock probe")
    r = _Reader(body)
    r.pos = len(CLOCK_PROBE)
    (seq,) = r.take(_U64)
    r.done()
    return int(seq)


def encode_clock_pong(seq: int, wall_ms: int) -> bytes:
    """Payload of a probe's reply: the probe's sequence number and the answering node's wall
    clock in milliseconds (signed: a badly set clock may read before the epoch)."""
    return _PONG.pack(seq, wall_ms)


def decode_clock_pong(body: bytes | memoryview) -> tuple[int, int]:
    r = _Reader(body)
    seq, wall_ms = r.take(_PONG)
    r.done()
    return int(seq), int(wall_ms)


# -- handshake and calls ------------------------------------------------------------------------
def encode_hello(node_id: int, nonce: bytes) -> bytes:
    return _U64.pack(node_id) + nonce


def decode_hello(body: bytes | memoryview) -> tuple[int, bytes]:
    r = _Reader(body)
    (node_id,) = r.take(_U64)
    nonce = r.raw(len(body) - r.pos)
    if len(nonce) != 32:
        raise CodecError("hello nonce must be 32 bytes")
    return node_id, nonce


def encode_call(request_id: int, is_error: bool, payload: bytes) -> bytes:
    """Body of a ``CALL``/``REPLY`` frame (``is_error`` only meaningful in replies)."""
    return _CALL.pack(request_id, int(is_error)) + payload


def decode_call(body: bytes | memoryview) -> tuple[int, bool, bytes]:
    r = _Reader(body)
    request_id, is_error = r.take(_CALL)
    return request_id, bool(is_error), r.raw(len(body) - r.pos)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a large frame body."""

    transfer: int
    kind: FrameKind
    index: int
    count: int
    total: int
    crc: int
    data: bytes


def encode_chunk(c: Chunk) -> bytes:
    """Body of a ``CHUNK`` frame."""
    return _CHUNK.pack(c.transfer, int(c.kind), c.index, c.count, c.total, c.crc) + c.data


def decode_chunk(body: bytes | memoryview) -> Chunk:
    r = _Reader(body)
    transfer, kind, index, count, total, crc = r.take(_CHUNK)
    if not 0 <= index < count:
        raise CodecError(f"chunk {index} of {count}")
    try:
        inner = FrameKind(kind)
    except ValueError:
        raise NewerFrame(kind, inner=True) from None
    if inner is FrameKind.CHUNK:
        raise CodecError("a chunk cannot carry a chunk")
    return Chunk(transfer, inner, index, count, total, crc, r.raw(len(body) - r.pos))


def split_chunks(transfer: int, kind: FrameKind, body: bytes, size: int) -> list[Chunk]:
    """``body`` as consecutive chunks of at most ``size`` bytes."""
    count = max(1, -(-len(body) // size))
    crc = zlib.crc32(body)
    view = memoryview(body)
    return [
        Chunk(transfer, kind, i, count, len(body), crc, bytes(view[i * size : (i + 1) * size]))
        for i in range(count)
    ]
