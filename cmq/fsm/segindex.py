"""The segment index: what a restore needs from a sealed segment, kept in a file beside it so
that a restart reads three arrays instead of every record header (pure: the bytes only; the
stores keep them, `cmq.fsm.framed` decides when one is used).

Layout (little-endian)::

    [4s magic "CMQX"][u8 version][q first_seq][q count][q size]
    [u64 offset] x (count + 1)    the byte offset of each record, then the end of the last (= size)
    [i64 sent_at_ms] x count
    [i64 visible_at_ms] x count
    [u32 crc32 of everything before]

Versions: `INDEX_VERSION` (1), written only once the ``segment_index`` feature flag is enabled
(`cmq.upgrade.features`). A newer version raises `NewerLayout` naming both versions; anything
else malformed (short, bad magic, a checksum or a count that disagrees) raises
`InvalidParameter`. Either way the segment itself is the truth: the store falls back to
scanning it (`cmq.fsm.framed.FramedStore`), so an index never turns damage into data loss.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from dataclasses import dataclass

from cmq.errors import InvalidParameter, NewerLayout

__all__ = ["INDEX_MAGIC", "INDEX_VERSION", "SegmentIndex", "decode_index", "encode_index"]

INDEX_MAGIC = b"CMQX"
INDEX_VERSION = 1
"""The layout above; a reader refuses a higher one (`NewerLayout`)."""
_HEAD = struct.Struct("<4sBqqq")
"""magic, version, first seq, record count, segment size."""
_CRC = struct.Struct("<I")
_SWAP = sys.byteorder != "little"


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """Where each record of one segment starts and its two times (index = seq - first_seq).

    ``offsets`` has ``count + 1`` entries: 0, the end of each record; the last is ``size``."""

    first_seq: int
    size: int
    offsets: array[int]
    sent_at: array[int]
    visible_at: array[int]

    @property
    def count(self) -> int:
        return len(self.sent_at)


def encode_index(index: SegmentIndex) -> bytes:
    """The index file's bytes (see the module docstring); `InvalidParameter` if the arrays
    disagree with each other or with ``size``."""
    n = index.count
    if len(index.visible_at) != n or len(index.offsets) != n + 1 or index.offsets[-1] != index.size:
        raise InvalidParameter(
            f"segment index of {index.first_seq}: {len(index.offsets)} offsets, {n} send times, "
            f"{len(index.visible_at)} visibility times, size {index.size}"
        )
    parts = [_HEAD.pack(INDEX_MAGIC, INDEX_VERSION, index.first_seq, n, index.size)]
    for a, code in ((index.offsets, "Q"), (index.sent_at, "q"), (index.visible_at, "q")):
        arr = a if a.typecode == code and not _SWAP else array(code, a)
        if _SWAP:
            arr.byteswap()
        parts.append(arr.tobytes())
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def index_version(data: bytes) -> int | None:
    """The version byte of an index file, or None if it does not start like one."""
    if len(data) < _HEAD.size or data[:4] != INDEX_MAGIC:
        return None
    return data[4]


def decode_index(data: bytes) -> SegmentIndex:
    """The index in ``data``: `NewerLayout` for a newer version (checked before anything else:
    a newer layout may differ anywhere after the version byte), `InvalidParameter` if damaged."""
    version = index_version(data)
    if version is None:
        raise InvalidParameter("not a segment index (no CMQX header)")
    if version > INDEX_VERSION:
        raise NewerLayout(
            f"segment index version {version} is from a newer release (this release reads "
            f"version {INDEX_VERSION})"
        )
    if version != INDEX_VERSION:
        raise InvalidParameter(f"segment index version {version} is unknown")
    _, _, first_seq, count, size = _HEAD.unpack_from(data, 0)
    if count < 0 or len(data) != _HEAD.size + 8 * (3 * count + 1) + _CRC.size:
        raise InvalidParameter(f"segment index of {count} records has {len(data)} bytes")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(memoryview(data)[: len(data) - _CRC.size]) != crc:
        raise InvalidParameter("segment index checksum mismatch")
    view = memoryview(data)
    pos = _HEAD.size
    arrays: list[array[int]] = []
    for code, n in (("Q", count + 1), ("q", count), ("q", count)):
        arr = array(code)
        arr.frombytes(view[pos : pos + 8 * n])
        if _SWAP:
            arr.byteswap()
        arrays.append(arr)
        pos += 8 * n
    offsets, sent_at, visible_at = arrays
    if offsets[0] != 0 or offsets[-1] != size:
        raise InvalidParameter(
            f"segment index offsets run {offsets[0]}..{offsets[-1]}, not 0..{size}"
        )
    return SegmentIndex(first_seq, size, offsets, sent_at, visible_at)
