"""Checking a segment's stored records (`cmq.fsm.store` frames) as they are read back: each
frame's length, checksum and seq, and a whole segment's records against the layout a snapshot
recorded. Pure: the caller reads the bytes (`cmq.fsm.framed`).
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Callable

from cmq.errors import InvalidParameter, NewerFormat, NewerLayout, SegmentDamaged
from cmq.fsm.segindex import SegmentIndex
from cmq.fsm.store import FRAME, SegmentLayout, StoredMessage, decode_payload, record_times

__all__ = ["check_frame", "decode_record", "scan_records"]


def scan_records(
    where: str,
    read: Callable[[int, int], bytes],
    layout: SegmentLayout,
    prefix: SegmentIndex | None,
) -> tuple[array[int], array[int], array[int]]:
    """The offsets, send and visibility times of every record up to the layout's size:
    those of ``prefix`` (an index of the first records) and the records after it, each
    record read checked (`SegmentDamaged` on damage). ``read(offset, size)`` reads the
    segment named ``where``."""
    if prefix is None:
        offsets: array[int] = array("Q", [0])
        sent_at: array[int] = array("q")
        visible_at: array[int] = array("q")
        pos = 0
    else:
        offsets, sent_at, visible_at = prefix.offsets, prefix.sent_at, prefix.visible_at
        pos = prefix.size
    seq = layout.first_seq + len(sent_at)
    data = memoryview(read(pos, layout.size - pos))
    base = pos
    while pos < layout.size:
        payload, (s, sent, vis) = check_frame(where, pos, data[pos - base :], seq)
        pos += FRAME.size + len(payload)
        offsets.append(pos)
        sent_at.append(sent)
        visible_at.append(vis)
        seq = s + 1
    if len(sent_at) != layout.count:
        raise SegmentDamaged(
            where,
            -1,
            f"{len(sent_at)} records up to byte {layout.size}, the snapshot records {layout.count}",
        )
    return offsets, sent_at, visible_at


def check_frame(
    where: str, offset: int, data: memoryview, seq: int
) -> tuple[memoryview, tuple[int, int, int]]:
    """The payload of the frame at the start of ``data`` (stored at ``offset``) and its
    times, seq ``seq``; any damage is `SegmentDamaged` naming the segment ``where`` and the
    offset."""
    if len(data) < FRAME.size:
        raise SegmentDamaged(where, offset, "torn record header")
    length, crc = FRAME.unpack_from(data, 0)
    payload = data[FRAME.size : FRAME.size + length]
    if len(payload) != length:
        raise SegmentDamaged(where, offset, "torn record")
    if zlib.crc32(payload) != crc:
        raise SegmentDamaged(where, offset, "checksum mismatch in the record")
    try:
        times = record_times(payload)
    except InvalidParameter as e:
        raise SegmentDamaged(where, offset, f"bad record: {e}") from None
    if times[0] != seq:
        raise SegmentDamaged(where, offset, f"seq {times[0]} where {seq} belongs")
    return payload, times


def decode_record(where: str, offset: int, data: memoryview, seq: int) -> tuple[StoredMessage, int]:
    """The message of the record at the start of ``data`` (checked as `check_frame` does) and
    `decode_payload`'s second value; a record of a newer release is `NewerFormat`."""
    payload, _ = check_frame(where, offset, data, seq)
    try:
        return decode_payload(payload)
    except NewerLayout as e:
        raise NewerFormat(f"{where}: the record at offset {offset}: {e}") from None
    except InvalidParameter as e:
        raise SegmentDamaged(where, offset, f"bad record: {e}") from None
