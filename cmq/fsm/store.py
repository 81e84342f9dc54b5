"""The `SegmentStore` protocol the state machine writes messages through, and the segment record
format. Pure: no I/O here (the implementations live in `cmq.fsm.segments`).

A queue's messages live in segments named by their first seq. A segment is a sequence of records
framed ``[u32 len][u32 crc32(payload)][payload]`` (little-endian); the payload is
``[i64 seq][i64 sent_at_ms][i64 visible_at_ms][u8 flags][u32 len][id utf-8][u32 n]
([u32 len][key][u32 len][value])*n [body: the rest]``. ``flags`` bit 0: the body is binary.
``visible_at_ms`` is the message's initial visibility (sent + delay): with ``sent_at_ms`` it is
what a restore needs from the files, so the snapshot image need not carry per-message times.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cmq.errors import InvalidParameter
from cmq.fsm.wire import Reader

FRAME = struct.Struct("<II")
"""``[u32 payload length][u32 crc32 of the payload]``."""
_TIMES = struct.Struct("<qqq")
_RECORD_HEAD = struct.Struct("<qqqBI")
"""The payload's fixed head: the three times, the flags and the id's length."""
_U32 = struct.Struct("<I")
_NO_ATTRIBUTES = _U32.pack(0)
FLAG_BINARY = 1


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as stored in a segment (what a consumer eventually receives)."""

    id: str
    seq: int
    body: bytes
    binary: bool
    attributes: tuple[tuple[str, str], ...]
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class SegmentLayout:
    """What a snapshot records about one segment: its first seq, how many records it holds and
    the byte offset after the last of them (the file is truncated to it on restore)."""

    first_seq: int
    count: int
    size: int


@dataclass(frozen=True, slots=True)
class RecoveredSegment:
    """Per-record times read back from a segment on restore (index = seq - first_seq)."""

    first_seq: int
    sent_at: array[int]
    visible_at: array[int]


def encode_record(message: StoredMessage, visible_at_ms: int) -> bytes:
    """The framed record of ``message`` (see the module docstring)."""
    mid = message.id.encode()
    parts = [
        _RECORD_HEAD.pack(
            message.seq,
            message.sent_at_ms,
            visible_at_ms,
            FLAG_BINARY if message.binary else 0,
            len(mid),
        ),
        mid,
    ]
    if message.attributes:
        parts.append(_U32.pack(len(message.attributes)))
        for k, v in message.attributes:
            kb, vb = k.encode(), v.encode()
            parts += (_U32.pack(len(kb)), kb, _U32.pack(len(vb)), vb)
    else:
        parts.append(_NO_ATTRIBUTES)
    parts.append(message.body)
    size = 0
    crc = 0
    for part in parts:
        size += len(part)
        crc = zlib.crc32(part, crc)
    parts[0:0] = (FRAME.pack(size, crc),)
    return b"".join(parts)


def decode_payload(payload: bytes | memoryview) -> tuple[StoredMessage, int]:
    """The message and its initial ``visible_at_ms`` from a record payload (crc already
    checked); raises `InvalidParameter` if malformed."""
    seq, sent_at, visible_at = record_times(payload)
    r = Reader(payload, _TIMES.size)
    flags = r.u8()
    mid = r.text()
    attrs = tuple((r.text(), r.text()) for _ in range(r.u32()))
    body = r.raw(r.remaining())
    return StoredMessage(mid, seq, body, bool(flags & FLAG_BINARY), attrs, sent_at), visible_at


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
        """No more appends to this segment (its open handle may be closed)."""
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

    def recover(
        self, layout: Mapping[str, Sequence[SegmentLayout]]
    ) -> dict[str, list[RecoveredSegment]]:
        """Make the stored segments exactly ``layout``: truncate each to its recorded size
        (records beyond it are re-applied from the Raft log), remove segments and queues not in
        it, and return the per-record times of every listed segment. A listed segment missing,
        shorter than recorded, holding a different number of records, or failing its checksum
        raises `InvariantBroken`."""
        ...
