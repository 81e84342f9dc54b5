"""The routes of the native JSON API: one table (`ROUTES`) read by both the aiohttp application
(`api.app`) and the OpenAPI document (`api.openapi`), so a route cannot exist in one and not the
other. Pure: no aiohttp; handlers take a `Context` and the decoded request model and return a
`Reply`.

Each handler is thin: request model -> `cmq.model` values -> `QueueService` call -> response
model. Queue logic lives behind the service. The table's types are `api.routing`'s; the node
administration routes are `api.node_routes`', the archive's `api.segment_routes`' and
backups' `api.backup_routes`'.
"""

from __future__ import annotations

import dataclasses
import logging

from msgspec import Struct

from api.auth.access import ANY, DELETE, RECEIVE, SEND, SIGNED
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
from api.segment_routes import SEGMENT_ROUTES
from api.status_models import ClusterStatus, GroupDigestResponse
from cmq.errors import (
    DiskFull,
    FeatureNotEnabled,
    GroupNotFound,
    InvalidParameter,
    MessageTooLarge,
    QueueAlreadyExists,
    Unavailable,
)
from cmq.model import is_fifo_name

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
        action=SIGNED,
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
        action=ANY,
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
        action=SEND,
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
        action=RECEIVE,
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
        action=RECEIVE,
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
        action=DELETE,
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
        action=DELETE,
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
        action=DELETE,
    ),
    *SEGMENT_ROUTES,
    Route(
        "GET",
        "/v1/status",
        "clusterStatus",
        "This node's view of every Raft group (role, term, leader, commit, lag)",
        cluster_status,
        _ok("Status", ClusterStatus),
        action=SIGNED,
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
