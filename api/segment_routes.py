"""The archive's routes (`cmq.archive`, a client of these only), added to `api.routes.ROUTES`:
a queue's segments on the answering node's replica, a released segment's records (JSON lines
with a trailer, or the binary read), and the claims and marks of an archive batch. Thin handlers
over `QueueService`'s segment methods (`cmq.node.archive_side`); their values are
`cmq.segment_values`.
"""

from __future__ import annotations

import base64
import logging
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec

from api.auth.access import RECEIVE
from api.routing import QUEUE_ERRORS, Context, Reply, Response, Route
from api.segment_models import (
    ArchivedRequest,
    ArchivedResponse,
    ClaimRequest,
    ClaimResponse,
    SegmentListing,
    SegmentRecordLine,
    SegmentStreamTrailer,
)
from cmq.errors import (
    CorruptSegment,
    FeatureNotEnabled,
    InvalidParameter,
    SegmentNotFound,
    SegmentNotReleased,
)
from cmq.segment_values import SEGMENT_DATA_MEDIA_TYPE, SEGMENT_STATES, SegmentData, SegmentRecord

log = logging.getLogger(__name__)

_S = "/v1/queues/{name}/segments"
DEFAULT_CLAIM_TTL_MS = 600_000
_STATE_PARAM: Mapping[str, Any] = {
    "name": "state",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": ["all", *SEGMENT_STATES], "default": "all"},
    "description": "Only the segments in this state; all = active, sealed and released "
    "(archived_pending, this replica's segments whose files await removal, only on request).",
}
_FIRST_SEQ_PARAM: Mapping[str, Any] = {
    "name": "first_seq",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 1},
    "description": "The segment's first seq.",
}
_NDJSON_SCHEMA: Mapping[str, Any] = {
    "type": "string",
    "description": "One JSON object per line: SegmentRecordLine objects in seq order, then one "
    "SegmentStreamTrailer (absent: the stream was cut).",
}


def _int_param(ctx: Context, name: str) -> int:
    raw = ctx.params.get(name, "")
    if not raw.isdigit() or len(raw) > 19 or int(raw) < 1:
        raise InvalidParameter(f"{name} must be a positive integer; got {raw!r}")
    return int(raw)


async def list_segments(ctx: Context, _: None) -> Reply:
    unknown = set(ctx.query) - {"state"}
    if unknown:
        raise InvalidParameter(f"unknown query parameter {sorted(unknown)[0]!r}")
    state = ctx.query.get("state", "all")
    if state not in ("all", *SEGMENT_STATES):
        raise InvalidParameter(f"state must be one of all, {', '.join(SEGMENT_STATES)}")
    listing = await ctx.service.list_segments(ctx.name, state)
    return Reply(SegmentListing.of(listing))


_line_encoder = msgspec.json.Encoder()


def _record_line(r: SegmentRecord) -> bytes:
    line = SegmentRecordLine(
        seq=r.seq,
        id=r.id,
        sent_at_ms=r.sent_at_ms,
        receive_count=r.receive_count,
        attributes=dict(r.attributes),
        body_b64=base64.b64encode(r.body).decode(),
        outcome=r.outcome,  # type: ignore[arg-type]
        priority=r.priority,
    )
    return _line_encoder.encode(line) + b"\n"


def _data_chunks(ctx: Context, data: SegmentData) -> AsyncIterator[bytes]:
    """``data``'s bytes; damage ends them early, without the stream CRC (a reader sees a cut
    stream)."""

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in data.chunks:
                yield chunk
        except CorruptSegment as e:
            log.error("%s: binary stream cut without its CRC: %s", ctx.path, e)

    return chunks()


async def segment_records(ctx: Context, _: None) -> Reply:
    """The records stream of a released segment (see `SegmentStreamTrailer`), or its binary
    read (`cmq.fsm.segdata`) when ``Accept`` names `SEGMENT_DATA_MEDIA_TYPE` and the
    ``segment_read_binary`` flag is enabled."""
    if ctx.query:
        raise InvalidParameter(f"unknown query parameter {sorted(ctx.query)[0]!r}")
    first_seq = _int_param(ctx, "first_seq")
    if SEGMENT_DATA_MEDIA_TYPE in ctx.accept:
        try:
            data = await ctx.service.read_segment_data(ctx.name, first_seq)
        except FeatureNotEnabled:
            pass  # answer the JSON lines, as a node without the binary form does
        else:
            body = _data_chunks(ctx, data)
            return Reply(b"", content_type=SEGMENT_DATA_MEDIA_TYPE, stream=body)
    stream = await ctx.service.read_segment(ctx.name, first_seq)

    async def chunks() -> AsyncIterator[bytes]:
        crc = count = 0
        try:
            async for batch in stream.batches:
                lines = [_record_line(r) for r in batch]
                for line in lines:
                    crc = zlib.crc32(line, crc)
                count += len(lines)
                if lines:
                    yield b"".join(lines)
        except CorruptSegment as e:
            log.error("%s: stream cut without a trailer: %s", ctx.path, e)
            return
        trailer = SegmentStreamTrailer(
            end=True, count=count, stream_crc=f"{crc:08x}", checksum=stream.checksum
        )
        yield _line_encoder.encode(trailer) + b"\n"

    return Reply(b"", content_type="application/x-ndjson", stream=chunks())


async def claim_segments(ctx: Context, req: ClaimRequest) -> Reply:
    ttl = DEFAULT_CLAIM_TTL_MS if req.ttl_ms is None else req.ttl_ms
    result = await ctx.service.claim_segments(ctx.name, req.batch_id, req.segments, ttl)
    return Reply(ClaimResponse.of(result))


async def mark_archived(ctx: Context, req: ArchivedRequest) -> Reply:
    result = await ctx.service.mark_archived(ctx.name, req.batch_id, req.segments)
    return Reply(ArchivedResponse.of(result))


SEGMENT_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        _S,
        "listSegments",
        "A queue's segments on this node's replica (for the archive)",
        list_segments,
        (Response(200, "The segments, by first seq", SegmentListing),),
        raises=(*QUEUE_ERRORS, InvalidParameter),
        parameters=(_STATE_PARAM,),
        description="Served from the answering node's replica of the queue's group (any node "
        "hosting it; the leader is not needed), so an archive job can prefer a follower.",
        action=RECEIVE,
    ),
    Route(
        "GET",
        f"{_S}/{{first_seq}}/records",
        "readSegmentRecords",
        "Stream the records of a released segment, with their outcomes",
        segment_records,
        (
            Response(
                200,
                "Chunked application/x-ndjson: record lines, then the trailer",
                None,
                media_type="application/x-ndjson",
                schema=_NDJSON_SCHEMA,
            ),
        ),
        raises=(
            *QUEUE_ERRORS,
            InvalidParameter,
            SegmentNotFound,
            SegmentNotReleased,
            CorruptSegment,
        ),
        parameters=(_FIRST_SEQ_PARAM,),
        description="Read from this node's replica. Each record is checked against its stored "
        "CRC; damage found before the answer starts is 500 corrupt_segment, later it ends the "
        "stream without its trailer. A reader checks the trailer: present, count and stream_crc "
        "match the lines received, checksum matches the listing. With `Accept: "
        "application/x-cmq-segment` (and the segment_read_binary flag enabled) the answer is "
        "the binary read instead: the segment's stored bytes with their offsets and outcome "
        "tables, ending with a CRC-32 of the stream (docs/architecture.md, 'Binary segment "
        "read'); otherwise the JSON lines, so a reader checks the answer's Content-Type.",
        action=RECEIVE,
    ),
    Route(
        "POST",
        f"{_S}/claim",
        "claimSegments",
        "Claim released segments for an archive batch",
        claim_segments,
        (Response(200, "Claimed and refused segments, after commit", ClaimResponse),),
        request=ClaimRequest,
        raises=QUEUE_ERRORS,
        description="A segment is claimed when it is released and unclaimed, its claim expired, "
        "or this batch already claims it (renewed).",
    ),
    Route(
        "POST",
        f"{_S}/archived",
        "markSegmentsArchived",
        "Mark released segments archived (every replica deletes their files)",
        mark_archived,
        (
            Response(
                200,
                "Archived, already archived and refused segments, after commit",
                ArchivedResponse,
            ),
        ),
        request=ArchivedRequest,
        raises=QUEUE_ERRORS,
        description="Idempotent. A released segment unclaimed or claimed by this batch (expired "
        "or not) is archived; one claimed by another batch with an unexpired claim is refused.",
    ),
)
