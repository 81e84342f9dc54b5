"""The routes of the native JSON API: one table (`ROUTES`) read by both the aiohttp application
(`api.app`) and the OpenAPI document (`api.openapi`), so a route cannot exist in one and not the
other. Pure: no aiohttp; handlers take a `Context` and the decoded request model and return a
`Reply`.

Each handler is thin: request model -> `cmq.model` values -> `QueueService` call -> response
model. Queue logic lives behind the service. The table's types are `api.routing`'s; the node
administration routes are `api.node_routes`'.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
from msgspec import Struct

from api.auth.whoami import WHOAMI_ROUTES
from api.backup_routes import BACKUP_ROUTES
from api.message_models import (
    PeekedMessage,
    PeekQuery,
    PeekResponse,
    ReceivedMessage,
    ReceiveResponse,
    SendResponse,
    Sent,
)
from api.models import (
    AckRequest,
    CreateQueueRequest,
    CreateQueueResponse,
    DeleteQueueResponse,
    EmptyRequest,
    Health,
    NackRequest,
    PurgeResponse,
    Queue,
    QueueAttributes,
    QueueAttributesResponse,
    QueueList,
    QueueRef,
    QueueStats,
    Ready,
    ReceiveRequest,
    ResultsResponse,
    RewindRequest,
    RewindResponse,
    SendRequest,
    SetAttributesRequest,
    VisibilityRequest,
)
from api.node_routes import CLUSTER_ROUTES, NODE_ROUTES
from api.routing import QUEUE_ERRORS, SERVICE_ERRORS, Context, Reply, Response, Route
from api.segment_models import (
    ArchivedRequest,
    ArchivedResponse,
    ClaimRequest,
    ClaimResponse,
    SegmentListing,
    SegmentRecordLine,
    SegmentStreamTrailer,
)
from api.status_models import ClusterStatus, GroupDigestResponse
from cmq.errors import (
    CorruptSegment,
    DiskFull,
    FeatureNotEnabled,
    GroupNotFound,
    InvalidParameter,
    MessageTooLarge,
    QueueAlreadyExists,
    SegmentNotFound,
    SegmentNotReleased,
    Unavailable,
)
from cmq.model import is_fifo_name
from cmq.segment_values import SEGMENT_DATA_MEDIA_TYPE, SEGMENT_STATES, SegmentData, SegmentRecord

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Handlers


async def list_queues(ctx: Context, _: None) -> Reply:
    names = await ctx.service.list_queues()
    return Reply(QueueList([QueueRef(name) for name in names]))


async def create_queue(ctx: Context, req: CreateQueueRequest) -> Reply:
    attributes = req.to_model()
    created = await ctx.service.create_queue(ctx.name, attributes)
    body = CreateQueueResponse(ctx.name, created, QueueAttributes.of(attributes))
    if created:
        return Reply(body, 201, {"Location": ctx.path})
    return Reply(body)


async def get_queue(ctx: Context, _: None) -> Reply:
    attributes, stats = await ctx.service.get_queue(ctx.name)
    return Reply(Queue(ctx.name, QueueAttributes.of(attributes), QueueStats.of(stats)))


async def peek(ctx: Context, query: PeekQuery) -> Reply:
    peeked = await ctx.service.peek(ctx.name, query.peek)
    return Reply(PeekResponse([PeekedMessage.of(m) for m in peeked]))


async def set_attributes(ctx: Context, req: SetAttributesRequest) -> Reply:
    attributes = await ctx.service.set_attributes(ctx.name, req.to_model())
    return Reply(QueueAttributesResponse(ctx.name, QueueAttributes.of(attributes)))


async def delete_queue(ctx: Context, _: EmptyRequest) -> Reply:
    await ctx.service.delete_queue(ctx.name)
    return Reply(DeleteQueueResponse(ctx.name, deleted=True))


async def purge(ctx: Context, _: EmptyRequest) -> Reply:
    return Reply(PurgeResponse(await ctx.service.purge(ctx.name)))


async def rewind(ctx: Context, req: RewindRequest) -> Reply:
    return Reply(RewindResponse(await ctx.service.rewind(ctx.name, req.since_ms())))


async def send(ctx: Context, req: SendRequest) -> Reply:
    sent = await ctx.service.send(ctx.name, [m.to_model() for m in req.messages])
    fifo = is_fifo_name(ctx.name)
    return Reply(SendResponse([Sent.of(m, fifo) for m in sent]))


async def receive(ctx: Context, req: ReceiveRequest) -> Reply:
    max_messages = 1 if req.max_messages is None else req.max_messages
    received = await ctx.service.receive(
        ctx.name,
        max_messages,
        req.visibility_timeout,
        req.wait_seconds,
        attempt_id=req.attempt_id,
    )
    return Reply(ReceiveResponse([ReceivedMessage.of(m) for m in received]))


async def ack(ctx: Context, req: AckRequest) -> Reply:
    return Reply(ResultsResponse.of(await ctx.service.ack(ctx.name, req.receipts)))


async def change_visibility(ctx: Context, req: VisibilityRequest) -> Reply:
    results = await ctx.service.change_visibility(ctx.name, req.to_model())
    return Reply(ResultsResponse.of(results))


async def nack(ctx: Context, req: NackRequest) -> Reply:
    delay = 0 if req.delay_seconds is None else req.delay_seconds
    return Reply(ResultsResponse.of(await ctx.service.nack(ctx.name, req.receipts, delay)))


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


async def cluster_status(ctx: Context, _: None) -> Reply:
    """The service's view, rendered as it is (`ClusterStatus` only documents it)."""
    return Reply(ctx.service.status())


async def group_digest(ctx: Context, _: None) -> Reply:
    part = ctx.path.split("/")[3] if ctx.path.count("/") >= 3 else ""
    if not part.isdigit() or int(part) < 1 or len(part) > 18:
        raise InvalidParameter(f"{part!r} is not a data group id (a positive integer)")
    d = await ctx.service.group_digest(int(part))
    return Reply(GroupDigestResponse(**dataclasses.asdict(d)))


async def healthz(ctx: Context, _: None) -> Reply:
    """Liveness: answers while the process can serve HTTP; never consults the cluster."""
    return Reply(Health("ok"))


async def readyz(ctx: Context, _: None) -> Reply:
    try:
        ready = ctx.service.is_ready()
    except Exception:
        log.exception("readiness check failed", extra={"event": "request_failed"})
        ready = False
    return Reply(Ready(ready), status=200 if ready else 503)


async def metrics(ctx: Context, _: None) -> Reply:
    body, content_type = await ctx.served.metrics.render_async()
    return Reply(body, headers={"Content-Type": content_type}, content_type=None)


async def openapi(ctx: Context, _: None) -> Reply:
    return Reply(ctx.served.openapi)


# ---------------------------------------------------------------------------------------------
# The table

_Q = "/v1/queues/{name}"
_M = f"{_Q}/messages"
_S = f"{_Q}/segments"
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


def _ok(description: str, model: type[Struct]) -> tuple[Response, ...]:
    return (Response(200, description, model),)


ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/queues",
        "listQueues",
        "List queues",
        list_queues,
        _ok("Every queue, sorted by name", QueueList),
        raises=SERVICE_ERRORS,
    ),
    Route(
        "PUT",
        _Q,
        "createQueue",
        "Create a queue (idempotent)",
        create_queue,
        (
            Response(201, "Created", CreateQueueResponse),
            Response(200, "Already existed with these attributes", CreateQueueResponse),
        ),
        request=CreateQueueRequest,
        request_required=False,
        raises=(*SERVICE_ERRORS, QueueAlreadyExists),
        description="201 with a Location header when created; 200 when the queue already "
        "exists with identical attributes; 409 QueueAlreadyExists when it exists with different "
        "ones. Omitted attributes take their defaults.",
    ),
    Route(
        "GET",
        _Q,
        "getQueue",
        "Queue attributes and statistics",
        get_queue,
        _ok("The queue", Queue),
        raises=QUEUE_ERRORS,
    ),
    Route(
        "PATCH",
        _Q,
        "setQueueAttributes",
        "Change some attributes",
        set_attributes,
        _ok("The attributes after the change", QueueAttributesResponse),
        request=SetAttributesRequest,
        raises=QUEUE_ERRORS,
    ),
    Route(
        "DELETE",
        _Q,
        "deleteQueue",
        "Delete a queue and its messages",
        delete_queue,
        _ok("Deleted", DeleteQueueResponse),
        request=EmptyRequest,
        request_required=False,
        raises=QUEUE_ERRORS,
    ),
    Route(
        "POST",
        f"{_Q}/purge",
        "purgeQueue",
        "Delete every message of a queue",
        purge,
        _ok("How many messages were deleted", PurgeResponse),
        request=EmptyRequest,
        request_required=False,
        raises=QUEUE_ERRORS,
    ),
    Route(
        "POST",
        f"{_Q}/rewind",
        "rewindQueue",
        "Deliver acknowledged messages sent since a time once more",
        rewind,
        _ok("How many acknowledged messages are deliverable again", RewindResponse),
        request=RewindRequest,
        raises=(*QUEUE_ERRORS, FeatureNotEnabled),
        description="Every acknowledged message sent at or after `since` that the queue still "
        "retains (its `retain_acked_seconds`) becomes visible again, once, as a replicated "
        "command: its receive count restarts, and the archive never writes it twice. Live "
        "messages keep their state; expired, dead-lettered and purged ones are not rewound. "
        "FIFO queues refuse it (InvalidParameter). Needs the admin grant on the queue.",
    ),
    Route(
        "POST",
        _M,
        "sendMessages",
        "Send a batch of messages",
        send,
        _ok("Committed on a majority, in order", SendResponse),
        request=SendRequest,
        raises=(*QUEUE_ERRORS, MessageTooLarge, DiskFull),
        description="Returns only after every message is fsynced on a majority of the queue's "
        "replicas.",
    ),
    Route(
        "GET",
        _M,
        "peekMessages",
        "Read the messages at the head without leasing them",
        peek,
        _ok("Up to `peek` visible messages, lowest seq first (maybe none)", PeekResponse),
        query=PeekQuery,
        raises=QUEUE_ERRORS,
        description="Read-only: nothing is leased, counted or changed. The messages visible "
        "at the queue's clock as of its leader's last applied command.",
    ),
    Route(
        "POST",
        f"{_M}/receive",
        "receiveMessages",
        "Lease visible messages (long poll)",
        receive,
        _ok("Leased messages (maybe none)", ReceiveResponse),
        request=ReceiveRequest,
        request_required=False,
        raises=QUEUE_ERRORS,
        description="A received message is invisible to others until its visibility timeout "
        "passes, it is acked, nacked, or its visibility is changed.",
    ),
    Route(
        "POST",
        f"{_M}/ack",
        "ackMessages",
        "Delete received messages",
        ack,
        _ok("Per-receipt results, after commit", ResultsResponse),
        request=AckRequest,
        raises=QUEUE_ERRORS,
    ),
    Route(
        "POST",
        f"{_M}/visibility",
        "changeVisibility",
        "Extend or shorten leases",
        change_visibility,
        _ok("Per-receipt results", ResultsResponse),
        request=VisibilityRequest,
        raises=QUEUE_ERRORS,
    ),
    Route(
        "POST",
        f"{_M}/nack",
        "nackMessages",
        "Release leases (visible again after delay_seconds)",
        nack,
        _ok("Per-receipt results", ResultsResponse),
        request=NackRequest,
        raises=QUEUE_ERRORS,
    ),
    Route(
        "GET",
        _S,
        "listSegments",
        "A queue's segments on this node's replica (for the archive)",
        list_segments,
        _ok("The segments, by first seq", SegmentListing),
        raises=(*QUEUE_ERRORS, InvalidParameter),
        parameters=(_STATE_PARAM,),
        description="Served from the answering node's replica of the queue's group (any node "
        "hosting it; the leader is not needed), so an archive job can prefer a follower.",
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
    ),
    Route(
        "POST",
        f"{_S}/claim",
        "claimSegments",
        "Claim released segments for an archive batch",
        claim_segments,
        _ok("Claimed and refused segments, after commit", ClaimResponse),
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
        _ok("Archived, already archived and refused segments, after commit", ArchivedResponse),
        request=ArchivedRequest,
        raises=QUEUE_ERRORS,
        description="Idempotent. A released segment unclaimed or claimed by this batch (expired "
        "or not) is archived; one claimed by another batch with an unexpired claim is refused.",
    ),
    Route(
        "GET",
        "/v1/status",
        "clusterStatus",
        "This node's view of every Raft group (role, term, leader, commit, lag)",
        cluster_status,
        _ok("Status", ClusterStatus),
    ),
    Route(
        "GET",
        "/v1/groups/{group}/digest",
        "groupDigest",
        "Hashes of a data group's state on this node (applied index, image, segment files)",
        group_digest,
        _ok("Digest", GroupDigestResponse),
        raises=(InvalidParameter, GroupNotFound, Unavailable),
    ),
    Route(
        "GET",
        "/healthz",
        "healthz",
        "Liveness: the process answers (never depends on quorum)",
        healthz,
        _ok("Alive", Health),
    ),
    Route(
        "GET",
        "/readyz",
        "readyz",
        "Readiness: every group of this node has a leader",
        readyz,
        (Response(200, "Ready", Ready), Response(503, "Not ready", Ready)),
    ),
    Route(
        "GET",
        "/metrics",
        "metrics",
        "Prometheus metrics (text exposition format)",
        metrics,
        (
            Response(
                200,
                "Every collector of the node's registry",
                None,
                media_type="text/plain",
                schema={"type": "string"},
            ),
        ),
    ),
    Route(
        "GET",
        "/openapi.json",
        "openapi",
        "This document",
        openapi,
        (Response(200, "OpenAPI 3.1 document", None, schema={"type": "object"}),),
    ),
    *WHOAMI_ROUTES,
    *NODE_ROUTES,
    *CLUSTER_ROUTES,
    *BACKUP_ROUTES,
)
"""Every route of the application, in the order the OpenAPI document lists them."""
