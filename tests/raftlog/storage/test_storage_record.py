"""Record framing and payload codecs: round trips, limits and damage detection."""

from __future__ import annotations

import struct
import zlib

import pytest

from raftlog.core.types import ConfState, Entry, EntryKind, HardState, SnapshotMeta
from raftlog.storage.record import (
    HEADER_SIZE,
    ConfRecord,
    DropRecord,
    EntriesRecord,
    FrameStatus,
    HardStateRecord,
    Record,
    SnapshotRecord,
    check_frame,
    decode_record,
    encode_record,
    find_valid_frame,
)

RECORDS: list[Record] = [
    EntriesRecord((Entry(1, 1),)),
    EntriesRecord(
        (
            Entry(3, 10, EntryKind.NORMAL, b"hello"),
            Entry(3, 11, EntryKind.CONF, bytes(range(256)) * 3),
            Entry(4, 12, EntryKind.NORMAL, b""),
        )
    ),
    HardStateRecord(HardState(7, 2, 99)),
    HardStateRecord(HardState((1 << 64) - 1, 0, 0)),
    SnapshotRecord(SnapshotMeta(100, 5, ConfState((1, 2, 3), (9,))), installed=True),
    SnapshotRecord(SnapshotMeta(1, 1, ConfState()), installed=False),
    ConfRecord(ConfState((1, 2), (3, 4))),
    ConfRecord(ConfState()),
    DropRecord(),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_round_trip(record: Record) -> None:
    frame = encode_record(42, record)
    group, decoded, end = decode_record(frame)
    assert (group, decoded, end) == (42, record, len(frame))
    # Frames concatenate: decoding from an offset inside a larger buffer works too.
    buf = b"xx" + frame + encode_record(7, HardStateRecord(HardState(1, 1, 1)))
    assert decode_record(buf, 2)[:2] == (42, record)
    assert decode_record(buf, 2 + len(frame))[0] == 7


def test_frame_layout_is_length_crc_type_group_payload() -> None:
    frame = encode_record(5, HardStateRecord(HardState(1, 2, 3)))
    length, crc, rtype, group = struct.unpack_from(">IIBQ", frame)
    assert length == len(frame) - 8
    assert crc == zlib.crc32(frame[8:])
    assert (rtype, group) == (2, 5)
    assert frame[HEADER_SIZE:] == struct.pack(">QQQ", 1, 2, 3)


def test_encoder_rejects_malformed_records() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        encode_record(1, EntriesRecord(()))
    with pytest.raises(ValueError, match="not consecutive"):
        encode_record(1, EntriesRecord((Entry(1, 1), Entry(1, 3))))
    with pytest.raises(ValueError, match=">= 1"):
        encode_record(1, EntriesRecord((Entry(0, 1),)))
    with pytest.raises(ValueError, match="u64"):
        encode_record(-1, DropRecord())
    with pytest.raises(ValueError, match="exceeds the limit"):
        encode_record(1, EntriesRecord((Entry(1, 1, data=b"x" * 100),)), max_body=64)


def test_decoder_limits_and_damage() -> None:
    frame = encode_record(1, EntriesRecord((Entry(1, 1, data=b"x" * 100),)))
    assert check_frame(frame, 0, 1 << 20) == (FrameStatus.OK, len(frame))
    assert check_frame(frame, 0, 64)[0] is FrameStatus.BAD_LENGTH
    assert check_frame(frame[:-1], 0, 1 << 20)[0] is FrameStatus.SHORT
    assert check_frame(frame[:5], 0, 1 << 20)[0] is FrameStatus.SHORT
    assert check_frame(bytes(20), 0, 1 << 20)[0] is FrameStatus.BAD_LENGTH
    for i in range(4, len(frame)):  # every byte after the length field is covered by the crc
        damaged = bytearray(frame)
        damaged[i] ^= 0x01
        assert check_frame(bytes(damaged), 0, 1 << 20)[0] is FrameStatus.BAD_CHECKSUM
        with pytest.raises(ValueError):
            decode_record(bytes(damaged))


def _frame(rtype: int, payload: bytes) -> bytes:
    body = struct.pack(">BQ", rtype, 1) + payload
    return struct.pack(">II", len(body), zlib.crc32(body)) + body


@pytest.mark.parametrize(
    ("rtype", "payload", "reason"),
    [
        (99, b"", "unknown record type"),
        (2, b"\0" * 23, "expected 24"),
        (1, struct.pack(">QI", 1, 0), "count 0"),
        (1, struct.pack(">QI", 1, 1) + struct.pack(">QBI", 1, 0, 10) + b"abc", "truncated"),
        (1, struct.pack(">QI", 1, 1) + struct.pack(">QBI", 1, 7, 0), "unknown kind"),
        (1, struct.pack(">QI", 1, 1) + struct.pack(">QBI", 0, 0, 0), "term 0"),
        (1, struct.pack(">QI", 1, 1) + struct.pack(">QBI", 1, 0, 0) + b"z", "trailing"),
        (4, struct.pack(">II", 2, 0) + struct.pack(">QQ", 2, 1), "sorted"),
        (4, struct.pack(">II", 1, 1) + struct.pack(">QQ", 2, 2), "overlap"),
        (4, struct.pack(">II", 5, 0), "too short"),
        (3, struct.pack(">QQB", 1, 1, 0x80) + struct.pack(">II", 0, 0), "flags"),
        (5, b"x", "no payload"),
    ],
)
def test_decoder_rejects_checksummed_garbage(rtype: int, payload: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_record(_frame(rtype, payload))


def test_find_valid_frame_skips_garbage() -> None:
    frame = encode_record(3, DropRecord())
    buf = b"\0" * 13 + b"\xff" * 7 + frame
    assert find_valid_frame(buf, 0, 1 << 20) == 20
    assert find_valid_frame(buf, 21, 1 << 20) is None
    assert find_valid_frame(b"\0" * 100, 0, 1 << 20) is None
