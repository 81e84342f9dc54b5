"""The `SegmentStore` protocol the state machine writes messages through, and the segment record
format. Pure: no I/O here (the implementations live in `cmq.fsm.segments`).

A queue's messages live in segments named by their first seq. A segment is a sequence of records
framed ``[u32 len][u32 crc32(payload)][payload]`` (little-endian); the payload is
``[i64 seq][i64 sent_at_ms][i64 visible_at_ms][u8 flags]([u8 priority])[u32 len][id utf-8][u32 n]
([u32 len][key][u32 len][value])*n [body: the rest]``. ``flags`` bit 0: the body is binary;
bit 1: the message has a priority level above 0, in the byte after the flags (written only then,
so a record of a queue without priorities is byte for byte the layout of release 0.1.0).
``visible_at_ms`` is the message's initial visibility (sent + delay): with ``sent_at_ms`` it is
what a restore needs from the files, so the snapshot image need not carry per-message times.

Versions: this record layout is version 1 (`RECORD_LAYOUT_VERSION`, implicit: no byte carries
it; written unchanged since release 0.1.0; the level bit exists only once the
``message_priorities`` flag is on, which needs every node's release to read it). A later layout is
recognised by a ``flags`` bit this release does not know (it reads bits 0 and 1): `decode_tail`
raises `NewerLayout` for it, and the segment store names the file and offset
(`cmq.errors.NewerFormat`), never "corrupt".
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cmq.errors import InvalidParameter, NewerLayout
from cmq.fsm.wire import Reader

FRAME = struct.Struct("<II")
"""``[u32 payload length][u32 crc32 of the payload]``."""
_TIMES = struct.Struct("<qqq")
_TAIL_HEAD = struct.Struct("<BI")
"""A record tail's fixed head: the flags and the id's length."""
_U32 = struct.Struct("<I")
_NO_ATTRIBUTES = _U32.pack(0)
FLAG_BINARY = 1
FLAG_PRIORITY = 2
"""The record carries a ``u8`` priority level (1-255) right after the flags byte."""
KNOWN_FLAGS = FLAG_BINARY | FLAG_PRIORITY
RECORD_LAYOUT_VERSION = 1
"""The record layout above; implicit (a later one sets a flag bit outside `KNOWN_FLAGS`)."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as stored in a segment (what a consumer eventually receives)."""

    id: str
    seq: int
    body: bytes
    binary: bool
    attributes: tuple[tuple[str, str], ...]
    sent_at_ms: int
    priority: int = 0
    """The message's priority level (0 = lowest, the default; stored only when above 0)."""


@dataclass(frozen=True, slots=True)
class SegmentLayout:
    """What a snapshot records about one segment: its first seq, how many records it holds and
    the byte offset after the last of them (the file is truncated to it on restore), and
    whether it was sealed (its bytes final: recovery may stage its index)."""

    first_seq: int
    count: int
    size: int
    sealed: bool = False


@dataclass(frozen=True, slots=True)
class RecoveredSegment:
    """Per-record times read back from a segment on restore (index = seq - first_seq)."""

    first_seq: int
    sent_at: array[int]
    visible_at: array[int]


def record_tail(
    mid: str,
    binary: bool,
    attributes: tuple[tuple[str, str], ...],
    body: bytes,
    priority: int = 0,
) -> bytes:
    """A record payload after its three times: what a producer's message contributes
    (``[u8 flags]([u8 priority])[u32 len][id][u32 n](attributes)[body]``). A `Produce` carries
    it as is (without a level: the command carries the level as an option, and apply adds it
    with `with_priority`), so apply frames a record by prepending the times instead of encoding
    the message again."""
    mid_bytes = mid.encode()
    flags = FLAG_BINARY if binary else 0
    if priority:
        if not 0 < priority < 256:
            raise InvalidParameter(f"priority {priority} is outside 0-255")
        parts = [bytes((flags | FLAG_PRIORITY, priority)), _U32.pack(len(mid_bytes)), mid_bytes]
    else:
        parts = [_TAIL_HEAD.pack(flags, len(mid_bytes)), mid_bytes]
    if attributes:
        parts.append(_U32.pack(len(attributes)))
        for k, v in attributes:
            kb, vb = k.encode(), v.encode()
            parts += (_U32.pack(len(kb)), kb, _U32.pack(len(vb)), vb)
    else:
        parts.append(_NO_ATTRIBUTES)
    parts.append(body)
    return b"".join(parts)


def with_priority(tail: bytes, priority: int) -> bytes:
    """``tail`` (a `record_tail` without a level) carrying the level ``priority`` (1-255)."""
    if not 0 < priority < 256:
        raise InvalidParameter(f"priority {priority} is outside 1-255")
    return b"".join((bytes((tail[0] | FLAG_PRIORITY, priority)), memoryview(tail)[1:]))


def frame_record(seq: int, sent_at_ms: int, visible_at_ms: int, tail: bytes) -> bytes:
    """The framed record of a message from its times and its `record_tail`."""
    times = _TIMES.pack(seq, sent_at_ms, visible_at_ms)
    crc = zlib.crc32(tail, zlib.crc32(times))
    return b"".join((FRAME.pack(len(times) + len(tail), crc), times, tail))


def encode_record(message: StoredMessage, visible_at_ms: int) -> bytes:
    """The framed record of ``message`` (see the module docstring)."""
    m = message
    tail = record_tail(m.id, m.binary, m.attributes, m.body, m.priority)
    return frame_record(message.seq, message.sent_at_ms, visible_at_ms, tail)


def decode_tail(
    data: bytes | memoryview, start: int, end: int
) -> tuple[str, bool, tuple[tuple[str, str], ...], int, int]:
    """``(id, binary, attributes, priority, body offset)`` of the `record_tail` in
    ``data[start:end]`` (the body is ``data[offset:end]``; priority 0 when the record has no
    level); raises `InvalidParameter` if malformed, `NewerLayout` for flags a newer release sets
    (a tail is stored as proposed). On the apply path of every message: no `Reader` unless the
    message has attributes."""
    if end > len(data) or start + _TAIL_HEAD.size + 4 > end:
        raise InvalidParameter("record too short")
    flags = data[start]
    if flags & ~KNOWN_FLAGS:
        raise NewerLayout(
            f"unknown record flags {flags:#x}: a newer release's record (this release reads the "
            f"flags {KNOWN_FLAGS:#x}, record layout {RECORD_LAYOUT_VERSION})"
        )
    priority = 0
    if flags & FLAG_PRIORITY:
        priority = data[start + 1]
        if not priority:
            raise InvalidParameter("record priority flag set with level 0")
        start += 1
        if start + _TAIL_HEAD.size + 4 > end:
            raise InvalidParameter("record too short")
    (id_len,) = _U32.unpack_from(data, start + 1)
    binary = bool(flags & FLAG_BINARY)
    id_end = start + _TAIL_HEAD.size + id_len
    if id_end + 4 > end:
        raise InvalidParameter("record id overruns the record")
    try:
        mid = str(data[id_end - id_len : id_end], "utf-8")
    except UnicodeDecodeError as e:
        raise InvalidParameter(f"bad UTF-8 text: {e}") from None
    (n,) = _U32.unpack_from(data, id_end)
    if not n:
        return mid, binary, (), priority, id_end + 4
    r = Reader(memoryview(data)[:end], id_end + 4)
    attrs = tuple((r.text(), r.text()) for _ in range(n))
    return mid, binary, attrs, priority, r.pos


def decode_payload(payload: bytes | memoryview) -> tuple[StoredMessage, int]:
    """The message and its initial ``visible_at_ms`` from a record payload (crc already
    checked); raises `InvalidParameter` if malformed."""
    seq, sent_at, visible_at = record_times(payload)
    end = len(payload)
    mid, binary, attrs, priority, body_at = decode_tail(payload, _TIMES.size, end)
    body = bytes(payload[body_at:end])
    return StoredMessage(mid, seq, body, binary, attrs, sent_at, priority), visible_at


def record_times(payload: bytes | memoryview) -> tuple[int, int, int]:
    """``(seq, sent_at_ms, visible_at_ms)`` from the head of a record payload."""
    if len(payload) < _TIMES.size:
        raise InvalidParameter("record payload too short")
    seq, sent_at, visible_at = _TIMES.unpack_from(payload, 0)
    return int(seq), int(sent_at), int(visible_at)


class SegmentStore(Protocol):
    """Where a data group's message records live (files, or memory in tests).

    Contract: appends are not fsynced (the Raft log is the durable copy) but are readable at
    once; `flush` makes every append so far durable (fsync of dirty segment files and of
    directories that gained entries); `recover` brings the files back to a snapshot's layout.
    A checksum mismatch or a missing/short segment is reported as `InvariantBroken` naming the
    file and offset, never skipped.
    """

    def append(
        self,
        queue: str,
        segment: int,
        messages: Sequence[StoredMessage],
        frames: Sequence[bytes],
    ) -> int:
        """Append ``frames`` (the `encode_record` of ``messages``, consecutive seqs) to segment
        ``segment`` of ``queue`` (created if new); returns the segment's size afterwards."""
        ...

    def seal(self, queue: str, segment: int) -> None:
        """No more appends to this segment (its open handle may be closed); while the index
        gate is open, its index (`cmq.fsm.segindex`) is written by the next `flush`, after the
        segment's bytes are durable."""
        ...

    def index_when(self, gate: Callable[[], bool]) -> None:
        """Write segment indexes only while ``gate()`` is true (a node passes its
        ``segment_index`` feature flag); indexes on disk are read whatever it says."""
        ...

    def read(self, queue: str, segment: int, seq: int) -> StoredMessage:
        """The record of ``seq`` (served from the recent-message cache when possible)."""
        ...

    def release(self, queue: str, segment: int) -> None:
        """Every message of this sealed segment is deleted: remove it."""
        ...

    def drop_queue(self, queue: str) -> None:
        """Remove every segment of ``queue``."""
        ...

    def write_out(self) -> None:
        """Write appends the store holds in memory to their segments (a store may hold the
        appends of a batch of commands to write each segment once); called after every batch
        of applies. Reads and `flush` never miss held appends."""
        ...

    def flush(self) -> None:
        """Make every append so far durable (fsync); the blocking part of a snapshot."""
        ...

    def export(self, queue: str, segment: int, size: int) -> bytes:
        """The first ``size`` bytes of a segment, for shipping it with a snapshot (may run on
        a worker thread while appends go on)."""
        ...

    def install(self, queue: str, segment: int, data: bytes) -> None:
        """Replace a segment with bytes received from a leader (durable at the next flush)."""
        ...

    def scan(self, queue: str, segment: int, size: int, chunk: int) -> Iterator[bytes]:
        """The first ``size`` bytes of a segment in chunks of at most ``chunk`` bytes, read
        through a handle of its own opened at the first chunk (so a removal meanwhile does not
        cut the read short); fewer bytes than ``size`` when the segment is shorter or gone."""
        ...

    def verify(self, queue: str, segment: int, size: int, chunk: int) -> Iterator[int]:
        """Re-read the first ``size`` bytes of a segment in chunks of at most ``chunk`` bytes
        and check every record (frame, checksum, seqs in order from ``segment``), yielding the
        bytes checked so far after each chunk; damage raises `SegmentDamaged` (a scrub: see
        `cmq.node.scrubber`). Reads only, through its own handle, so it may run on a worker
        thread while appends go on (it reads what ended batches wrote)."""
        ...

    def recover(
        self, layout: Mapping[str, Sequence[SegmentLayout]]
    ) -> dict[str, list[RecoveredSegment]]:
        """Make the stored segments exactly ``layout``: truncate each to its recorded size
        (records beyond it are re-applied from the Raft log), remove segments, indexes and
        queues not in it, and return the per-record times of every listed segment. A listed
        segment missing or shorter than recorded raises `SegmentDamaged`; so does a scanned
        one holding a different number of records or failing a checksum. A segment whose valid
        index records exactly its layout's size and count is not scanned: only its last record
        is read and checked (damage before it is then found when read, or by a scrubber); one
        whose index covers a prefix of it is scanned after that prefix only."""
        ...
