"""The binary segment read on the archive's side: read the stream (``application/x-cmq-segment``
version 1; the layout is in docs/architecture.md, "Binary segment read", and
`cmq.fsm.segdata` writes it), check it end to end, and decode the stored records into Arrow
columns with numpy over the buffer: no Python object per record.

Checks, each failing the replica (`ReplicaFailed`, the reader then tries the next one): the
magic and version; the header's first seq and checksum equal the listing's; the stream is
complete (its final CRC present, nothing after it) and that CRC-32 equals the CRC of the bytes
that arrived before it but the file's; the segment's bytes are ``size`` long and their CRC-32
equals the listing's checksum (the stored bytes are exactly what was written: a corrupted
byte anywhere in the file fails here, never skipped); the offsets frame the records (each
record's length field, start at 0, end at ``size``); the seqs run from the first seq without a
gap; record flags are ones this release reads (bit 0 binary, bit 1 a priority byte after the
flags: the ``priority`` column, 0 when absent); every id, key and value lies inside its record
and is UTF-8; the rows archived (records not copied forward) are as many as the listing's
count.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

MEDIA_TYPE = "application/x-cmq-segment"
"""What the reader asks for with ``Accept`` (a node without it answers JSON lines)."""
MAGIC = b"CMQD"
VERSION = 1
HEAD = struct.Struct("<4sBqqqI")
_U32 = struct.Struct("<I")
OUTCOME_NAMES = ("acked", "expired", "dead_lettered", "purged")
_FLAG_BINARY = 1
_FLAG_PRIORITY = 2
_KNOWN_FLAGS = np.uint8(_FLAG_BINARY | _FLAG_PRIORITY)
_MIN_RECORD = 8 + 33
"""A record's frame (length, CRC) and its payload's fixed fields with an empty id."""

Int64s = npt.NDArray[np.int64]


class BadStream(Exception):
    """The stream fails a check (the message says which); the caller names the replica."""


Read = Callable[[int], bytes]
"""Reads exactly n bytes (fewer only at the stream's end)."""


class _Stream:
    """Reads from ``read`` while keeping the CRC of everything read."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self.crc = 0

    def take(self, n: int, what: str, covered: bool = True) -> bytes:
        """The next ``n`` bytes; ``covered``: they count in the stream CRC (the file's bytes
        do not: they have the stored checksum)."""
        data = self._read(n) if n else b""
        if len(data) != n:
            raise BadStream(f"stream cut in {what} ({len(data)} of {n} bytes)")
        if covered:
            self.crc = zlib.crc32(data, self.crc)
        return data

    def u32(self, what: str) -> int:
        value: int = _U32.unpack(self.take(4, what))[0]
        return value

    def u32s(self, n: int, what: str) -> npt.NDArray[np.uint32]:
        return np.frombuffer(self.take(4 * n, what), dtype="<u4").astype(np.uint32)


@dataclass(frozen=True, slots=True)
class Raw:
    """A verified stream's parts: the segment's first seq, its file's bytes, the records'
    offsets (``count + 1``), the outcome tables (expired, dead-lettered, purged, copied
    forward), the receive counts (rels, values) and the stream's CRC."""

    first_seq: int
    data: bytes
    offsets: Int64s
    outcomes: list[npt.NDArray[np.uint32]]
    counts: tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]
    stream_crc: int


def read_stream(read: Read, first_seq: int, checksum: str) -> Raw:
    """Read one binary stream through ``read`` and check its framing, its CRCs and the stored
    checksum against the listing's (``first_seq``, ``checksum``); `BadStream` on any problem."""
    s = _Stream(read)
    magic, version, first, count, size, crc = HEAD.unpack(s.take(HEAD.size, "the header"))
    if magic != MAGIC:
        raise BadStream(f"not a binary segment stream (magic {magic!r})")
    if version != VERSION:
        raise BadStream(f"binary segment stream version {version}; this release reads {VERSION}")
    if first != first_seq:
        raise BadStream(f"the stream is of segment {first}")
    if f"{crc:08x}" != checksum.lower():
        raise BadStream(f"header checksum {crc:08x} does not match the listing's {checksum}")
    if count < 0 or size < 0 or count * _MIN_RECORD > size:
        raise BadStream(f"header counts {count} records in {size} bytes")
    outcomes = [s.u32s(s.u32("a table"), "a table") for _ in (*OUTCOME_NAMES[1:], "moved")]
    n = s.u32("the receive counts")
    counts = (s.u32s(n, "the receive counts"), s.u32s(n, "the receive counts"))
    pieces: list[bytes] = []  # nothing is allocated by a size the stream CRC has not checked
    got = 0
    file_crc = 0
    while True:
        length = s.u32("a frame length")
        if length == 0:
            break
        if got + length > size:
            raise BadStream(f"more than the {size} bytes of the segment")
        piece = s.take(length, "a frame", covered=False)
        pieces.append(piece)
        file_crc = zlib.crc32(piece, file_crc)
        got += length
    if got != size:
        raise BadStream(f"{got} of the segment's {size} bytes")
    data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
    if f"{file_crc:08x}" != checksum.lower():
        raise BadStream(
            f"the segment's bytes have CRC-32 {file_crc:08x}, the listing's checksum is "
            f"{checksum}: the replica's copy or the transfer is damaged"
        )
    offsets = np.frombuffer(s.take(8 * (count + 1), "the offsets"), dtype="<u8").astype(np.int64)
    computed = s.crc
    sent = _U32.unpack(s.take(4, "the stream CRC"))[0]
    if sent != computed:
        raise BadStream(f"stream CRC {sent:08x}, {computed:08x} arrived")
    if read(1):
        raise BadStream("data after the stream CRC")
    return Raw(first, data, offsets, outcomes, counts, computed)


def _gather(buf: npt.NDArray[np.uint8], at: Int64s, width: int, dtype: str) -> Any:
    """The little-endian values of ``dtype`` (``width`` bytes) starting at each of ``at``."""
    idx = at[:, None] + np.arange(width, dtype=np.int64)
    return buf[idx].reshape(-1).view(dtype)


def _slices(buf: pa.Buffer, starts: Int64s, ends: Int64s) -> pa.Array:
    """The byte ranges [starts, ends) of ``buf`` (ascending, disjoint) as one binary array:
    the ranges and the gaps between them interleaved, then every other one taken (a C++
    copy, no Python object per value)."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    bounds = np.empty(2 * n + 1, dtype=np.int64)
    bounds[0 : 2 * n : 2] = starts
    bounds[1 : 2 * n : 2] = ends
    bounds[2 * n] = ends[-1]
    large = bounds[-1] >= 2**31
    kind = pa.large_binary() if large else pa.binary()
    offsets = bounds if large else bounds.astype(np.int32)
    spans = pa.Array.from_buffers(kind, 2 * n, [None, pa.py_buffer(offsets), buf])
    out = pc.take(spans, pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
    return out.cast(pa.binary()) if large else out


def _strings(buf: pa.Buffer, starts: Int64s, ends: Int64s, what: str) -> pa.Array:
    try:
        return _slices(buf, starts, ends).cast(pa.string())
    except pa.ArrowInvalid:
        raise BadStream(f"{what} is not UTF-8") from None


def constant(value: str | None, n: int) -> pa.Array:
    """A string column of ``n`` rows, each ``value`` (null when None)."""
    if value is None:
        return pa.nulls(n, pa.string())
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if offsets[-1] >= 2**31:
        return pc.take(pa.array([value]), pa.array(np.zeros(n, dtype=np.int64)))
    data = pa.py_buffer(raw * n)
    small = pa.py_buffer(offsets.astype(np.int32))
    return pa.Array.from_buffers(pa.string(), n, [None, small, data])


def decode(raw: Raw, queue: str, expected_rows: int, schema: pa.Schema) -> pa.Table:
    """The archived rows of ``raw`` (records copied forward left out) as a table of ``schema``
    without its ``batch_id`` column (`BadStream` when a record does not decode or the rows are
    not ``expected_rows``)."""
    off = raw.offsets
    count = len(off) - 1
    size = len(raw.data)
    buf = np.frombuffer(raw.data, dtype=np.uint8)
    if off[0] != 0 or off[-1] != size or (count and np.any(np.diff(off) < _MIN_RECORD)):
        raise BadStream("the offsets do not frame the segment's bytes")
    start = off[:-1]
    end = off[1:]
    if count and np.any(_gather(buf, start, 4, "<u4").astype(np.int64) != end - start - 8):
        raise BadStream("a record's length field disagrees with the offsets")
    seq = _gather(buf, start + 8, 8, "<i8").astype(np.int64)
    if np.any(seq != raw.first_seq + np.arange(count, dtype=np.int64)):
        raise BadStream("the seqs do not run from the segment's first seq without a gap")
    sent = _gather(buf, start + 16, 8, "<i8").astype(np.int64)
    flags = buf[start + 32]
    if np.any(flags & ~_KNOWN_FLAGS):
        bad = int(flags[np.flatnonzero(flags & ~_KNOWN_FLAGS)[0]])
        raise BadStream(f"record flags {bad:#x}: a newer record layout than this release reads")
    leveled = (flags & np.uint8(_FLAG_PRIORITY)) != 0
    priority = np.zeros(count, dtype=np.int32)
    if np.any(leveled):  # a level byte after the flags; what follows moves on by one
        priority[leveled] = buf[start[leveled] + 33]
        if np.any(priority[leveled] == 0):
            raise BadStream("a record's priority flag is set with level 0")
    head = start + 33 + leveled.astype(np.int64)
    if np.any(head + 8 > end):
        raise BadStream("a record's id runs past its end")
    id_start = head + 4
    id_end = id_start + _gather(buf, head, 4, "<u4").astype(np.int64)
    if np.any(id_end + 4 > end):
        raise BadStream("a record's id runs past its end")
    pos = id_end + 4
    nattrs = _gather(buf, id_end, 4, "<u4").astype(np.int64)
    rows: list[Int64s] = []
    spans: list[tuple[Int64s, Int64s, Int64s, Int64s]] = []
    j = 0
    while True:
        has = np.flatnonzero(nattrs > j)
        if len(has) == 0:
            break
        at = pos[has]
        limit = end[has]
        if np.any(at + 4 > limit):
            raise BadStream("a record's attributes run past its end")
        k_end = at + 4 + _gather(buf, at, 4, "<u4").astype(np.int64)
        if np.any(k_end + 4 > limit):
            raise BadStream("a record's attributes run past its end")
        v_end = k_end + 4 + _gather(buf, k_end, 4, "<u4").astype(np.int64)
        if np.any(v_end > limit):
            raise BadStream("a record's attributes run past its end")
        rows.append(has)
        spans.append((at + 4, k_end, k_end + 4, v_end))
        pos[has] = v_end
        j += 1
    pabuf = pa.py_buffer(raw.data)
    ids = _strings(pabuf, id_start, id_end, "an id")
    bodies = _slices(pabuf, pos, end)
    attributes = _attributes(pabuf, count, rows, spans)
    codes = np.zeros(count, dtype=np.int8)
    moved = np.zeros(count, dtype=bool)
    for code, rels in enumerate(raw.outcomes):
        if len(rels) and int(rels.max()) >= count:
            raise BadStream("an outcome table names a record past the segment's end")
        if code < 3:
            codes[rels] = code + 1
        else:
            moved[rels] = True
    receive = (codes == 0).astype(np.int32)
    rels, values = raw.counts
    if len(rels) and int(rels.max()) >= count:
        raise BadStream("the receive counts name a record past the segment's end")
    receive[rels] = values.astype(np.int32)
    keep = ~moved
    rows_kept = int(keep.sum())
    if rows_kept != expected_rows:
        raise BadStream(f"{rows_kept} records to archive, the listing counts {expected_rows}")
    outcome = pc.take(pa.array(OUTCOME_NAMES, pa.string()), pa.array(codes))
    table = pa.Table.from_arrays(
        [
            constant(queue, count),
            pa.array(seq, pa.int64()),
            ids,
            bodies,
            pa.array(sent * 1000, schema.field("sent_at").type),
            pa.array(receive, pa.int32()),
            attributes,
            outcome,
            pa.array(priority, pa.int32()),
        ],
        schema=pa.schema([f for f in schema if f.name != "batch_id"]),
    )
    return table if rows_kept == count else table.filter(pa.array(keep))


def _attributes(
    buf: pa.Buffer,
    count: int,
    rows: list[Int64s],
    spans: list[tuple[Int64s, Int64s, Int64s, Int64s]],
) -> pa.Array:
    """The map column: per record its (key, value) pairs in stored order."""
    kind = pa.map_(pa.string(), pa.string())
    if not rows:
        none = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(np.zeros(count + 1, dtype=np.int32)), none, none)
    row = np.concatenate(rows)
    ks, ke, vs, ve = (np.concatenate([s[i] for s in spans]) for i in range(4))
    order = np.argsort(ks, kind="stable")  # stored order: by record, then pair
    row, ks, ke, vs, ve = row[order], ks[order], ke[order], vs[order], ve[order]
    per_row = np.bincount(row, minlength=count)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(per_row, out=offsets[1:])
    keys = _strings(buf, ks, ke, "an attribute key")
    values = _strings(buf, vs, ve, "an attribute value")
    out = pa.MapArray.from_arrays(pa.array(offsets), keys, values)
    return out.cast(kind)
