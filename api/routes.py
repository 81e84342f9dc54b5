"""The routes of the native JSON API: one table (`ROUTES`) read by both the aiohttp application
(`api.app`) and the OpenAPI document (`api.openapi`), so a route cannot exist in one and not the
other. Pure: no aiohttp; handlers take a `Context` and the decoded request model and return a
`Reply`.

Each handler is thin: request model -> `cmq.model` values -> `QueueService` call -> response
model. Queue logic lives behind the service.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from msgspec import Struct

from api.errors import InvalidJson
from api.metrics import HttpMetrics
from api.models import (
    AckRequest,
    ClusterStatus,
    CreateQueueRequest,
    CreateQueueResponse,
    DeleteQueueResponse,
    EmptyRequest,
    GroupDigestResponse,
    Health,
    JoinNodeRequest,
    JoinNodeResponse,
    NackRequest,
    NodeChanged,
    NodeList,
    NodeRow,
    PeekedMessage,
    PeekQuery,
    PeekResponse,
    PurgeResponse,
    Queue,
    QueueAttributes,
    QueueAttributesResponse,
    QueueList,
    QueueRef,
    QueueStats,
    Ready,
    ReceivedMessage,
    ReceiveRequest,
    ReceiveResponse,
    ResultsResponse,
    SendRequest,
    SendResponse,
    Sent,
    SetAttributesRequest,
    VisibilityRequest,
)
from cmq.errors import (
    CmqError,
    GroupNotFound,
    InvalidParameter,
    InvalidQueueName,
    MessageTooLarge,
    NodeBusy,
    NodeNotFound,
    OutcomeUnknown,
    Overloaded,
    QueueAlreadyExists,
    QueueNotFound,
    RequestTooLarge,
    Unavailable,
)
from cmq.service import QueueService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Served:
    """What the handlers of one application share."""

    service: QueueService
    metrics: HttpMetrics
    openapi: bytes
    """The OpenAPI document, encoded once."""


@dataclass(frozen=True, slots=True)
class Context:
    """One request as a handler sees it (the body is the handler's second argument)."""

    served: Served
    path: str
    """The request path (``/v1/queues/orders``)."""
    name: str = ""
    """The queue named by the path, already checked (empty when the route names none)."""

    @property
    def service(self) -> QueueService:
        return self.served.service


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's answer: a response model (or a plain dict for ``/v1/status``, or ready
    bytes), its status and extra headers. ``content_type`` None: ``headers`` set it."""

    body: Struct | dict[str, Any] | bytes
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str | None = "application/json"


Handler = Callable[[Context, Any], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class Response:
    """A documented response: status, description and body model (None: ``schema``)."""

    status: int
    description: str
    model: type[Struct] | None
    media_type: str = "application/json"
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """One operation: where it is, what it reads and answers, and which errors it can raise
    (documented by status; see `Route.errors`)."""

    method: str
    path: str
    operation_id: str
    summary: str
    handler: Handler
    responses: tuple[Response, ...]
    request: type[Struct] | None = None
    """The body model; None: the body is not read."""
    request_required: bool = True
    query: type[Struct] | None = None
    """The query parameters' model (a route reads a body or a query, not both)."""
    raises: tuple[type[CmqError], ...] = ()
    description: str | None = None

    @property
    def names_queue(self) -> bool:
        return "{name}" in self.path

    @property
    def errors(self) -> tuple[type[CmqError], ...]:
        """Every error class the route can answer with: ``raises`` plus those of a queue name
        in the path and of a request body."""
        implied: tuple[type[CmqError], ...] = ()
        if self.names_queue:
            implied += (InvalidQueueName,)
        if self.request is not None:
            implied += (InvalidParameter, InvalidJson, RequestTooLarge)
        if self.query is not None:
            implied += (InvalidParameter,)
        return tuple(dict.fromkeys(implied + self.raises))


SERVICE_ERRORS: tuple[type[CmqError], ...] = (CmqError, Unavailable, OutcomeUnknown, Overloaded)
"""What any `QueueService` call can raise (``CmqError`` itself is ``InternalError``)."""
QUEUE_ERRORS = (*SERVICE_ERRORS, QueueNotFound)


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


async def send(ctx: Context, req: SendRequest) -> Reply:
    sent = await ctx.service.send(ctx.name, [m.to_model() for m in req.messages])
    return Reply(SendResponse([Sent(m.id, m.seq) for m in sent]))


async def receive(ctx: Context, req: ReceiveRequest) -> Reply:
    max_messages = 1 if req.max_messages is None else req.max_messages
    received = await ctx.service.receive(
        ctx.name, max_messages, req.visibility_timeout, req.wait_seconds
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
        log.exception("readiness check failed")
        ready = False
    return Reply(Ready(ready), status=200 if ready else 503)


async def metrics(ctx: Context, _: None) -> Reply:
    body, content_type = ctx.served.metrics.render()
    return Reply(body, headers={"Content-Type": content_type}, content_type=None)


async def openapi(ctx: Context, _: None) -> Reply:
    return Reply(ctx.served.openapi)


# -- nodes (/v1/nodes) ------------------------------------------------------------------------
def _node_in_path(ctx: Context) -> int:
    """The node id of ``/v1/nodes/{node}[/...]``; `InvalidParameter` when it is not one."""
    part = ctx.path.split("/")[3] if ctx.path.count("/") >= 3 else ""
    if not part.isdigit() or int(part) < 1 or len(part) > 18:
        raise InvalidParameter(f"{part!r} is not a node id (a positive integer)")
    return int(part)


async def list_nodes(ctx: Context, _: None) -> Reply:
    rows = await ctx.service.list_nodes()
    return Reply(NodeList([NodeRow(**r) for r in rows]))


async def join_node(ctx: Context, req: JoinNodeRequest) -> Reply:
    peers = await ctx.service.join_node(
        req.id, req.address, req.http, tuple(req.data_dirs), req.zone
    )
    return Reply(JoinNodeResponse({str(n): a for n, a in peers.items()}))


async def drain_node(ctx: Context, _: EmptyRequest) -> Reply:
    node = _node_in_path(ctx)
    await ctx.service.drain_node(node)
    return Reply(NodeChanged(node, "draining"))


async def activate_node(ctx: Context, _: EmptyRequest) -> Reply:
    node = _node_in_path(ctx)
    await ctx.service.activate_node(node)
    return Reply(NodeChanged(node, "active"))


async def remove_node(ctx: Context, _: EmptyRequest) -> Reply:
    node = _node_in_path(ctx)
    await ctx.service.remove_node(node)
    return Reply(NodeChanged(node, "removed"))


_N = "/v1/nodes/{node}"
NODE_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/nodes",
        "listNodes",
        "Every registered node: zone, state, replicas, moves, leaders, lag",
        list_nodes,
        (Response(200, "Nodes", NodeList),),
        raises=SERVICE_ERRORS,
    ),
    Route(
        "POST",
        "/v1/nodes",
        "joinNode",
        "Register a node joining the cluster (cmq serve --join); idempotent",
        join_node,
        (Response(200, "Registered; every node's peer address", JoinNodeResponse),),
        request=JoinNodeRequest,
        raises=SERVICE_ERRORS,
    ),
    Route(
        "POST",
        f"{_N}/drain",
        "drainNode",
        "Move every replica and leadership off a node (asynchronous: watch listNodes)",
        drain_node,
        (Response(200, "Draining", NodeChanged),),
        request=EmptyRequest,
        request_required=False,
        raises=(*SERVICE_ERRORS, NodeNotFound, NodeBusy),
    ),
    Route(
        "POST",
        f"{_N}/activate",
        "activateNode",
        "Undo a drain: the node takes replicas again",
        activate_node,
        (Response(200, "Active", NodeChanged),),
        request=EmptyRequest,
        request_required=False,
        raises=(*SERVICE_ERRORS, NodeNotFound),
    ),
    Route(
        "DELETE",
        _N,
        "removeNode",
        "Forget a node; refused (NodeBusy) while it holds replicas or votes in the catalog",
        remove_node,
        (Response(200, "Removed", NodeChanged),),
        request=EmptyRequest,
        request_required=False,
        raises=(*SERVICE_ERRORS, NodeNotFound, NodeBusy),
    ),
)
"""The node administration routes (added to `ROUTES`)."""


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
        _M,
        "sendMessages",
        "Send a batch of messages",
        send,
        _ok("Committed on a majority, in order", SendResponse),
        request=SendRequest,
        raises=(*QUEUE_ERRORS, MessageTooLarge),
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
    *NODE_ROUTES,
)
"""Every route of the application, in the order the OpenAPI document lists them."""
