"""The archive read side of the HTTP API (listing, records stream, claim, mark-archived) against
the recording service: shapes, the stream's trailer, error statuses and codes."""

from __future__ import annotations

import base64
import zlib

import orjson
import pytest

from cmq.client.segments import RecordsReader
from cmq.errors import (
    CmqError,
    CorruptSegment,
    FeatureNotEnabled,
    QueueNotFound,
    SegmentNotFound,
    SegmentNotReleased,
)
from tests.api.conftest import Client
from tests.api.recording import Call, RecordingService


async def test_listing_renders_every_field(client: Client, service: RecordingService) -> None:
    resp = await client.get("/v1/queues/q/segments?state=released")
    assert resp.status == 200
    assert await resp.json() == {
        "queue": "q",
        "group": 1,
        "leader": 2,
        "segments": [
            {
                "first_seq": 1,
                "last_seq": 10,
                "count": 9,
                "bytes": 900,
                "state": "released",
                "checksum": "0a1b2c3d",
                "claim": {"batch_id": "b-1", "expires_at_ms": 5},
            }
        ],
    }
    await client.get("/v1/queues/q/segments")
    assert service.calls == [
        Call("list_segments", ("q", "released")),
        Call("list_segments", ("q", "all")),
    ]


async def test_records_stream_ends_with_a_checked_trailer(
    client: Client, service: RecordingService
) -> None:
    resp = await client.get("/v1/queues/q/segments/7/records")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/x-ndjson")
    raw = await resp.read()
    lines = raw.splitlines(keepends=True)
    assert len(lines) == 4
    first = orjson.loads(lines[0])
    assert first == {
        "seq": 7,
        "id": "m0",
        "sent_at_ms": 1000,
        "receive_count": 1,
        "attributes": {"k": "v"},
        "body_b64": "",
        "outcome": "acked",
        "priority": 0,  # always present, 0 for a message sent without a level
    }
    assert base64.b64decode(orjson.loads(lines[2])["body_b64"]) == b"xx"
    assert orjson.loads(lines[2])["priority"] == 4
    crc = 0
    for line in lines[:3]:
        crc = zlib.crc32(line, crc)
    assert orjson.loads(lines[3]) == {
        "end": True,
        "count": 3,
        "stream_crc": f"{crc:08x}",
        "checksum": "0a1b2c3d",
    }
    reader = RecordsReader("test", checksum="0a1b2c3d")
    records = [r for i in range(0, len(raw), 7) for r in reader.feed(raw[i : i + 7])]
    assert [r.seq for r in records] == [7, 8, 9]
    assert [r.priority for r in records] == [0, 2, 4]  # the client reads the level back
    assert reader.finish() == "0a1b2c3d"
    assert service.calls == [Call("read_segment", ("q", 7))]


async def test_damage_found_mid_stream_cuts_the_stream_without_a_trailer(
    client: Client, service: RecordingService
) -> None:
    service.corrupt_mid_stream = True
    resp = await client.get("/v1/queues/q/segments/7/records")
    assert resp.status == 200
    raw = await resp.read()
    assert [orjson.loads(line)["seq"] for line in raw.splitlines()] == [7, 8]
    reader = RecordsReader("test")
    assert len(list(reader.feed(raw))) == 2
    with pytest.raises(CorruptSegment, match="cut"):
        reader.finish()


BINARY = "application/x-cmq-segment"


async def test_the_binary_read_is_served_to_a_reader_asking_for_it(
    client: Client, service: RecordingService
) -> None:
    resp = await client.get(
        "/v1/queues/q/segments/7/records", headers={"Accept": f"{BINARY}, application/x-ndjson"}
    )
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith(BINARY)
    assert await resp.read() == b"headframeend"
    assert service.calls == [Call("read_segment_data", ("q", 7))]


async def test_the_json_lines_without_the_accept_or_the_flag(
    client: Client, service: RecordingService
) -> None:
    resp = await client.get("/v1/queues/q/segments/7/records")
    assert resp.headers["Content-Type"].startswith("application/x-ndjson")
    assert service.calls == [Call("read_segment", ("q", 7))]
    service.calls.clear()
    service.fail["read_segment_data"] = FeatureNotEnabled("segment_read_binary is not enabled")
    resp = await client.get("/v1/queues/q/segments/7/records", headers={"Accept": BINARY})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/x-ndjson")
    assert len((await resp.read()).splitlines()) == 4
    assert [c.method for c in service.calls] == ["read_segment_data", "read_segment"]


async def test_damage_mid_binary_stream_cuts_it_before_its_end(
    client: Client, service: RecordingService
) -> None:
    service.corrupt_mid_stream = True
    resp = await client.get("/v1/queues/q/segments/7/records", headers={"Accept": BINARY})
    assert resp.status == 200
    assert await resp.read() == b"headframe"  # no end, no stream CRC: the reader sees it cut


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (SegmentNotFound("archived"), 404, "segment_not_found"),
        (SegmentNotReleased("sealed"), 409, "segment_not_released"),
        (CorruptSegment("crc"), 500, "corrupt_segment"),
        (QueueNotFound("no q"), 404, "QueueNotFound"),
    ],
)
async def test_records_errors_before_the_stream(
    client: Client, service: RecordingService, error: CmqError, status: int, code: str
) -> None:
    service.fail["read_segment"] = error
    resp = await client.get("/v1/queues/q/segments/3/records")
    assert resp.status == status
    assert (await resp.json())["error"]["code"] == code


async def test_claim_and_mark_archived(client: Client, service: RecordingService) -> None:
    resp = await client.post(
        "/v1/queues/q/segments/claim", json={"batch_id": "b.1_x-2", "segments": [1, 11]}
    )
    assert resp.status == 200
    assert await resp.json() == {"claimed": [1, 11], "refused": []}
    resp = await client.post(
        "/v1/queues/q/segments/archived", json={"batch_id": "b", "segments": [3]}
    )
    assert await resp.json() == {"archived": [3], "already": [], "refused": []}
    assert service.calls == [
        Call("claim_segments", ("q", "b.1_x-2", [1, 11], 600_000)),
        Call("mark_archived", ("q", "b", [3])),
    ]


def test_the_reader_refuses_a_bad_trailer() -> None:
    line = orjson.dumps(
        {
            "seq": 1,
            "id": "a",
            "sent_at_ms": 1,
            "receive_count": 1,
            "attributes": {},
            "body_b64": "eA==",
            "outcome": "acked",
        }
    )
    line += b"\n"
    good = f"{zlib.crc32(line):08x}"

    def trailer(count: int, crc: str, checksum: str = "00000001") -> bytes:
        return orjson.dumps({"end": True, "count": count, "stream_crc": crc, "checksum": checksum})

    cases = [
        (line + trailer(2, good) + b"\n", "counts"),
        (line + trailer(1, "deadbeef") + b"\n", "stream_crc"),
        (line + trailer(1, good, "00000002") + b"\n", "listing"),
        (line + trailer(1, good) + b"\n" + line, "after the trailer"),
        (line + trailer(1, good), "cut"),
        (line[:-5] + b"\n" + trailer(1, good) + b"\n", "JSON"),
    ]
    for data, message in cases:
        reader = RecordsReader("test", checksum="00000001")
        with pytest.raises(CorruptSegment, match=message):
            list(reader.feed(data))
            reader.finish()
    reader = RecordsReader("test", checksum="00000001")
    assert [r.body for r in reader.feed(line + trailer(1, good) + b"\n")] == [b"x"]
    assert reader.finish() == "00000001"
