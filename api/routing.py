"""The route table's types (`Route`, its `Response`s, the `Context` a handler gets and the
`Reply` it returns) and the error sets routes share. Read by `api.routes` (the queue routes and
the table), `api.node_routes`, `api.app` and `api.openapi`. Pure: no aiohttp.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from msgspec import Struct

from api.auth.access import ADMIN
from api.auth.caller import Caller
from api.errors import InvalidJson
from api.metrics import HttpMetrics
from cmq.errors import (
    CmqError,
    InvalidParameter,
    InvalidQueueName,
    OutcomeUnknown,
    Overloaded,
    QueueNotFound,
    RequestTooLarge,
    Unavailable,
)
from cmq.service import QueueService

LEADER_HEADER = "Cmq-Leader"
"""The response header naming the HTTP address (``host:port``) of the node leading the queue a
call named, sent when the answering node is not that leader (docs/api.md, "Leader hint")."""

LeaderHint = Callable[[str], str]
"""Queue name -> the HTTP address of its leader when that is another node, else "" (no
header). Must be cheap: it runs after every queue call (`QueueNode.leader_http`)."""


@dataclass(frozen=True, slots=True)
class Served:
    """What the handlers of one application share."""

    service: QueueService
    metrics: HttpMetrics
    openapi: bytes
    """The OpenAPI document, encoded once."""
    leader_hint: LeaderHint | None = None
    """Where queue calls are best sent (see `LeaderHint`); None: no ``Cmq-Leader`` header."""


@dataclass(frozen=True, slots=True)
class Context:
    """One request as a handler sees it (the body is the handler's second argument)."""

    served: Served
    path: str
    """The request path (``/v1/queues/orders``)."""
    name: str = ""
    """The queue named by the path, already checked (empty when the route names none)."""
    params: Mapping[str, str] = field(default_factory=dict)
    """The path's other parameters (``first_seq``), unchecked."""
    query: Mapping[str, str] = field(default_factory=dict)
    """The query string's parameters, unchecked."""
    caller: Caller | None = None
    """Who signed the request; None: requests are not authenticated (``--anonymous``)."""
    accept: str = ""
    """The request's ``Accept`` header (empty when absent)."""

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
    stream: AsyncIterator[bytes] | None = None
    """Set: the answer is streamed (chunked) from these chunks after ``body``; it ends early,
    without error, if the iterator stops early (its format says how a reader notices)."""


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
    parameters: tuple[Mapping[str, Any], ...] = ()
    """OpenAPI parameter objects beyond the queue name (other path parts, the query)."""
    action: str = ADMIN
    """The grant a caller's key needs (`api.auth.access`: a `cmq.grants` action, ``ANY`` or
    ``SIGNED``): ``admin`` unless the route names another, so a new route is open to
    administrators only until it is given its action. Served without a signature instead:
    `api.auth.access.OPEN_OPERATIONS`."""
    grant_on_queue: bool | None = None
    """Whether ``action`` is needed on the route's queue or on the cluster (None: on the queue
    when the path names one)."""

    @property
    def names_queue(self) -> bool:
        return "{name}" in self.path

    @property
    def need(self) -> tuple[str, bool]:
        """The action the route needs and whether on its queue (`api.auth.access.native_need`)."""
        on_queue = self.names_queue if self.grant_on_queue is None else self.grant_on_queue
        return self.action, on_queue

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
