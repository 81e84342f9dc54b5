"""The binary read of a released segment (``application/x-cmq-segment``, version 1): the
segment file's stored bytes as they are, with the tables the archive needs to turn them into
rows (each record's offset, how each left the queue), so a reader decodes columns without a
per-record parse and checks the stored bytes against the segment's checksum itself.

Layout (little-endian), written only once the ``segment_read_binary`` flag is enabled::

    "CMQD" [u8 version = 1] [i64 first_seq] [i64 count] [i64 size] [u32 checksum]
    4 x ([u32 n] [u32 rel] x n)       the records (0-based within the segment) that were
                                      expired, dead-lettered, purged, not archived from
                                      here (copied forward: their copy is; rewound copies:
                                      their original was); every other one acked
    [u32 n] [u32 rel] x n [u32 receive count] x n
                                      final receive counts differing from the default
                                      (1 for an acked record, else 0)
    ([u32 len >= 1] [len bytes]) ...  the segment file's bytes, in order (``size`` in all)
    [u32 0]
    [u64 offset] x (count + 1)        each record's start in the file, then ``size``
    [u32 stream crc]                  CRC-32 of every byte before it but the file's
                                      (those have the recorded checksum)

``checksum`` is the CRC-32 of the segment's stored bytes as recorded (the listing's): a reader
compares it with the CRC of the file's bytes that arrived, and the stream CRC with the CRC of
every other byte, so each byte that arrived is checked once. Damage found while reading (a
short file, records not framing ``size`` bytes, bytes whose CRC differs from the recorded one)
raises `CorruptSegment` after the bytes read so far: the caller ends the stream there, so it
has no stream CRC and the reader treats it as cut.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterator

from cmq.errors import CorruptSegment
from cmq.fsm.cells import Segment
from cmq.fsm.store import SegmentStore
from cmq.segment_values import SEGMENT_DATA_MEDIA_TYPE

MEDIA_TYPE = SEGMENT_DATA_MEDIA_TYPE
MAGIC = b"CMQD"
VERSION = 1
HEAD = struct.Struct("<4sBqqqI")
"""Magic, version, first seq, record count, file size, recorded checksum."""
_U32 = struct.Struct("<I")
END = _U32.pack(0)


_LITTLE = array("H", [1]).tobytes() == b"\x01\x00"


def _le(values: array[int]) -> bytes:
    """``values`` (typecode ``I`` or ``Q``) as little-endian bytes."""
    if not _LITTLE:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _u32s(values: array[int]) -> bytes:
    if values.itemsize != 4:  # pragma: no cover - every supported platform has a 4-byte "I"
        raise ValueError("array('I') is not 4 bytes wide here")
    return _le(values)


def _table(values: array[int]) -> bytes:
    return _U32.pack(len(values)) + _u32s(values)


def encode_head(seg: Segment) -> bytes:
    """The header and outcome tables of released segment ``seg``."""
    rels = sorted(seg.counts)
    skipped = seg.moved | seg.replays if seg.replays else seg.moved
    parts = [
        HEAD.pack(MAGIC, VERSION, seg.first_seq, seg.count, seg.size, seg.crc),
        *(_table(bits.to_array()) for bits in (seg.expired, seg.dead, seg.purged, skipped)),
        _table(array("I", rels)),
        _u32s(array("I", [seg.counts[r] for r in rels])),
    ]
    return b"".join(parts)


class _Offsets:
    """Record starts found while the file's bytes go by (chunk by chunk)."""

    __slots__ = ("carry", "found", "next", "seen")

    def __init__(self) -> None:
        self.found = array("Q")
        self.next = 0
        """The next record's start (absolute)."""
        self.seen = 0
        """Bytes fed so far."""
        self.carry = b""
        """The last bytes of the previous chunk (a length field may straddle chunks)."""

    def feed(self, data: bytes) -> None:
        base = self.seen
        end = base + len(data)
        while self.next + 4 <= end:
            at = self.next - base
            if at >= 0:
                (length,) = _U32.unpack_from(data, at)
            else:  # straddles the previous chunk
                (length,) = _U32.unpack(self.carry[at:] + data[: at + 4])
            self.found.append(self.next)
            self.next += 8 + length
        self.seen = end
        self.carry = data[-3:]


def stream(store: SegmentStore, key: str, seg: Segment, chunk: int) -> Iterator[bytes]:
    """The binary read of released segment ``seg`` of queue store key ``key`` (the module
    docstring), in pieces of about ``chunk`` bytes; `CorruptSegment` on damage."""
    head = encode_head(seg)
    crc = zlib.crc32(head)
    yield head
    offsets = _Offsets()
    file_crc = 0
    for data in store.scan(key, seg.first_seq, seg.size, chunk):
        if not data:
            continue
        offsets.feed(data)
        file_crc = zlib.crc32(data, file_crc)
        frame = _U32.pack(len(data))
        crc = zlib.crc32(frame, crc)
        yield frame + data
    found = offsets.found
    where = f"segment {seg.first_seq} of {key}"
    if offsets.seen != seg.size or offsets.next != seg.size or len(found) != seg.count:
        raise CorruptSegment(
            f"{where}: read {offsets.seen} of {seg.size} B framing {len(found)} of "
            f"{seg.count} records (the last ending at {offsets.next})"
        )
    if file_crc != seg.crc:
        raise CorruptSegment(f"{where}: crc {file_crc:08x} (recorded {seg.crc:08x})")
    found.append(seg.size)
    tail = END + _le(found)
    crc = zlib.crc32(tail, crc)
    yield tail + _U32.pack(crc)
