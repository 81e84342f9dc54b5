"""The binary segment read, end to end without HTTP: what a node's state machine streams for a
released segment (`cmq.fsm.segdata`) decodes on the archive's side (`cmq.archive.segdata`) to
exactly the rows of the JSON form (outcomes, receive counts, records copied forward left out),
and any damage, a single flipped byte anywhere in the stream or the stored file, is refused
with a reason, never decoded into rows."""

from __future__ import annotations

import io
import zlib
from typing import Any

import pyarrow as pa
import pytest

from cmq.archive import segdata as reader
from cmq.archive.records import ARROW_SCHEMA
from cmq.errors import CorruptSegment
from cmq.fsm import DeadLetter, Expire, Leased, MemorySegmentStore, Purge, QueueMachine
from cmq.fsm import segdata as node
from cmq.fsm.cells import Segment
from cmq.fsm.store import FLAG_BINARY, StoredMessage, encode_record
from cmq.segment_values import SegmentRecord
from tests.cmq.fsm.harness import T0
from tests.cmq.fsm.lifecycle_env import Env, machine_run


def outcomes_env() -> Env:
    """Released segments with every outcome and receive counts other than the default."""
    e = Env()
    e.produce(10)
    e.produce(1, T0 + 1)  # seals 1..10
    e.ack(e.lease(3, T0 + 2), T0 + 2)
    e.lease(2, T0 + 3, vis=0)
    twice = e.lease(2, T0 + 4, vis=0)
    e.ack(Leased(twice.messages[:1], ()), T0 + 4)  # 4: acked after 2 receives
    e.lease(1, T0 + 5)  # 5 marked for the dead-letter queue
    e.run(DeadLetter("q", (5,)))
    e.run(Expire("q", T0 + 60_000 + 2))
    e.produce(9, T0 + 60_003)
    e.produce(1, T0 + 60_004)
    e.run(Purge("q", T0 + 60_005))
    return e


def json_rows(queue: str, records: list[SegmentRecord]) -> list[dict[str, Any]]:
    return [
        {
            "queue": queue,
            "seq": r.seq,
            "id": r.id,
            "body": r.body,
            "sent_at_ms": r.sent_at_ms,
            "receive_count": r.receive_count,
            "attributes": list(r.attributes),
            "outcome": r.outcome,
            "priority": r.priority,
        }
        for r in records
    ]


def decoded(stream: bytes, first: int, checksum: str, rows: int) -> list[dict[str, Any]]:
    raw = reader.read_stream(io.BytesIO(stream).read, first, checksum)
    table = reader.decode(raw, "q", rows, ARROW_SCHEMA)
    out = table.to_pylist()
    for row in out:
        row["sent_at_ms"] = int(row.pop("sent_at").timestamp() * 1000)
    return out


def released(m: QueueMachine) -> list[tuple[int, str, int]]:
    return [(s.first_seq, s.checksum, s.count) for s in m.segments("q", "released") or []]


@pytest.mark.parametrize("scenario", ["outcomes", "copied_forward"])
def test_the_binary_read_decodes_to_the_rows_of_the_json_form(scenario: str) -> None:
    m = outcomes_env().m if scenario == "outcomes" else machine_run(MemorySegmentStore())[0]
    segments = released(m)
    assert segments
    for first, checksum, count in segments:
        crc, pieces = m.segment_data("q", first, chunk=64)  # records straddle the chunks
        assert crc == checksum
        _, batches = m.records("q", first)
        expected = json_rows("q", [r for b in batches for r in b])
        assert len(expected) == count
        assert decoded(b"".join(pieces), first, checksum, count) == expected
    if scenario == "outcomes":  # every outcome and a receive count of 2 were streamed
        rows = [
            r
            for first, c, n in segments
            for r in decoded(b"".join(m.segment_data("q", first)[1]), first, c, n)
        ]
        assert {r["outcome"] for r in rows} == {"acked", "dead_lettered", "expired", "purged"}
        assert 2 in {r["receive_count"] for r in rows}


def small_stream() -> tuple[bytes, int, str, int]:
    m = outcomes_env().m
    first, checksum, count = released(m)[0]
    return b"".join(m.segment_data("q", first, chunk=200)[1]), first, checksum, count


def test_every_flipped_byte_of_the_stream_is_refused() -> None:
    stream, first, checksum, count = small_stream()
    assert len(decoded(stream, first, checksum, count)) == count
    for at in range(len(stream)):
        bad = bytearray(stream)
        bad[at] ^= 0x10
        with pytest.raises(reader.BadStream):
            decoded(bytes(bad), first, checksum, count)


def test_a_cut_stream_or_trailing_data_is_refused() -> None:
    stream, first, checksum, count = small_stream()
    for end in (0, 10, len(stream) // 2, len(stream) - 4, len(stream) - 1):
        with pytest.raises(reader.BadStream, match="cut"):
            decoded(stream[:end], first, checksum, count)
    with pytest.raises(reader.BadStream, match="after the stream CRC"):
        decoded(stream + b"x", first, checksum, count)


def test_a_listing_that_disagrees_is_refused() -> None:
    stream, first, checksum, count = small_stream()
    with pytest.raises(reader.BadStream, match="listing's"):
        decoded(stream, first, f"{int(checksum, 16) ^ 1:08x}", count)
    with pytest.raises(reader.BadStream, match="segment 1"):
        decoded(stream, first + 1, checksum, count)
    with pytest.raises(reader.BadStream, match="the listing counts"):
        decoded(stream, first, checksum, count + 1)


def one_segment(records: list[bytes]) -> tuple[bytes, Segment]:
    data = b"".join(records)
    seg = Segment(1, T0)
    seg.count, seg.size, seg.crc = len(records), len(data), zlib.crc32(data)
    seg.sealed = seg.released = True
    return data, seg


class Store:
    """A `SegmentStore` of one file (what `node.stream` reads)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def scan(self, queue: str, segment: int, size: int, chunk: int) -> Any:
        for at in range(0, min(size, len(self.data)), chunk):
            yield self.data[at : min(at + chunk, size)]


def record(seq: int, flags_extra: int = 0, attrs: tuple[tuple[str, str], ...] = ()) -> bytes:
    raw = encode_record(StoredMessage(f"m{seq}", seq, b"body", True, attrs, T0), T0)
    if flags_extra:
        at = 8 + 24  # the frame, then seq and both times: the flags byte
        payload = bytearray(raw[8:])
        payload[at - 8] |= flags_extra
        raw = raw[:4] + zlib.crc32(payload).to_bytes(4, "little") + bytes(payload)
    return raw


def test_record_flags_of_a_newer_layout_are_refused_by_name() -> None:
    data, seg = one_segment([record(1), record(2, flags_extra=0x04)])
    stream = b"".join(node.stream(Store(data), "k", seg, 1 << 20))  # type: ignore[arg-type]
    assert FLAG_BINARY == 1
    with pytest.raises(reader.BadStream, match="flags 0x5: a newer record layout"):
        decoded(stream, 1, f"{seg.crc:08x}", 2)


def test_a_records_level_decodes_into_the_priority_column() -> None:
    levels = (0, 3, 31, 0, 255)
    records = [
        encode_record(
            StoredMessage(f"m{i}", i, b"b%d" % i, i % 2 == 0, (("k", str(i)),) * (i % 2), T0, lv),
            T0,
        )
        for i, lv in enumerate(levels, 1)
    ]
    data, seg = one_segment(records)
    stream = b"".join(node.stream(Store(data), "k", seg, 16))  # type: ignore[arg-type]
    rows = decoded(stream, 1, f"{seg.crc:08x}", len(levels))
    assert [r["priority"] for r in rows] == list(levels)
    # What follows the level byte moves on by one: ids, attributes and bodies decode as stored.
    assert [r["id"] for r in rows] == [f"m{i}" for i in range(1, 6)]
    assert [r["body"] for r in rows] == [b"b%d" % i for i in range(1, 6)]
    assert [r["attributes"] for r in rows] == [[("k", str(i))] * (i % 2) for i in range(1, 6)]


def test_a_level_flag_with_level_0_is_refused() -> None:
    raw = bytearray(encode_record(StoredMessage("m1", 1, b"body", True, (), T0, 4), T0))
    raw[8 + 25] = 0  # the level byte after the flags
    raw[4:8] = zlib.crc32(raw[8:]).to_bytes(4, "little")
    data, seg = one_segment([bytes(raw)])
    stream = b"".join(node.stream(Store(data), "k", seg, 1 << 20))  # type: ignore[arg-type]
    with pytest.raises(reader.BadStream, match="level 0"):
        decoded(stream, 1, f"{seg.crc:08x}", 1)


def test_attributes_of_several_pairs_decode_in_stored_order() -> None:
    attrs = (("b", "2"), ("a", "1"), ("é", "ü"))
    data, seg = one_segment([record(1, attrs=attrs), record(2), record(3, attrs=attrs[:1])])
    stream = b"".join(node.stream(Store(data), "k", seg, 7))  # type: ignore[arg-type]
    rows = decoded(stream, 1, f"{seg.crc:08x}", 3)
    assert [r["attributes"] for r in rows] == [list(attrs), [], list(attrs[:1])]
    assert [r["body"] for r in rows] == [b"body"] * 3


def test_the_node_cuts_the_stream_of_a_damaged_file() -> None:
    data, seg = one_segment([record(1), record(2)])
    damaged = data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]
    pieces = node.stream(Store(damaged), "k", seg, 1 << 20)  # type: ignore[arg-type]
    with pytest.raises(CorruptSegment, match="recorded"):
        list(pieces)
    short = node.stream(Store(data[:-3]), "k", seg, 1 << 20)  # type: ignore[arg-type]
    with pytest.raises(CorruptSegment, match="read"):
        list(short)


def test_constant_columns() -> None:
    assert reader.constant("q", 3).to_pylist() == ["q", "q", "q"]
    assert reader.constant(None, 2).to_pylist() == [None, None]
    assert reader.constant("", 2).type == pa.string()
