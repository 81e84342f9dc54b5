"""The aiohttp application of the native JSON API: the routes of `api.routes.ROUTES` (checked
queue name -> capped body -> request model -> handler -> rendered reply), an error middleware
that renders every failure as JSON, and a metrics middleware.

The only thing called here is the `QueueService` protocol: queue logic lives behind it. The SQS
surface (`api.sqs`) is mounted next to these routes on the same service: ``/`` and the queue
URLs ``/<account>/<name>``; it answers its own errors in SQS's shapes. So is the streaming
protocol (`api.stream`, a WebSocket on ``/v1/stream``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CollectorRegistry

from api.auth.access import SIGNED, NativeOperation, allowed
from api.auth.access import STREAM as STREAM_ACTIONS
from api.auth.guard import CALLER, PRINCIPAL, AuthConfig, auth_middleware
from api.auth.key_routes import KEY_OPERATIONS, KeyAdministration, add_key_routes
from api.decoding import decode
from api.errors import (
    MethodNotAllowed,
    NotFound,
    RenderedError,
    error_body,
    is_server_fault,
    render_error,
    render_internal,
)
from api.metrics import UNMATCHED_ROUTE, HttpMetrics
from api.models import MAX_REQUEST_BYTES
from api.openapi import openapi_document
from api.routes import ROUTES
from api.routing import LEADER_HEADER, Context, LeaderHint, Reply, Route, Served
from api.sqs.http import SqsHandler
from api.sqs.queues import SqsSettings
from api.stream import STREAM_PATH, stream_handler
from cmq.consumers import Subscriptions
from cmq.errors import CmqError, InvalidParameter, RequestTooLarge
from cmq.model import check_queue_name
from cmq.service import QueueService

log = logging.getLogger(__name__)

SERVICE_KEY = web.AppKey("cmq.service", QueueService)
"""The `QueueService` the routes call."""
REGISTRY_KEY = web.AppKey("cmq.registry", CollectorRegistry)
"""The Prometheus registry ``/metrics`` renders; other components register collectors in it."""
HTTP_METRICS_KEY = web.AppKey("cmq.http_metrics", HttpMetrics)
MAX_REQUEST_BYTES_KEY = web.AppKey("cmq.max_request_bytes", int)
SERVED_KEY = web.AppKey("cmq.served", Served)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_encoder = msgspec.json.Encoder()


def make_app(
    service: QueueService,
    *,
    registry: CollectorRegistry | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    routes: Sequence[Route] = ROUTES,
    sqs: SqsSettings | None = None,
    auth: AuthConfig | None = None,
    keys: KeyAdministration | None = None,
    subscriptions: Subscriptions | None = None,
    leader_hint: LeaderHint | None = None,
) -> web.Application:
    """The native API on ``service``. ``registry`` receives the HTTP metrics and is what
    ``/metrics`` renders (a fresh one when None, never the process-global default, so several
    apps can live in one process). Request bodies above ``max_request_bytes`` get 413.
    ``routes`` are served and documented at ``/openapi.json`` (tests extend the table).
    ``sqs``: the SQS surface's settings (None: no SQS surface; ``cmq serve`` always mounts it).
    The SQS routes are not in ``/openapi.json``, which describes the native API.
    ``auth``: verify every request's signature and grants (`api.auth.guard`) before its
    handler runs (None: anonymous access). ``keys``: serve the ``/v1/keys`` administration
    routes on it (`api.auth.key_routes`). ``subscriptions``: counts the stream's open
    subscriptions per queue (`cmq.consumers`; the node's metrics read it). ``leader_hint``:
    after a successful call on a route naming a queue, the answer carries the ``Cmq-Leader``
    header when ``leader_hint(name)`` names another node (`api.routing.LeaderHint`)."""
    registry = CollectorRegistry() if registry is None else registry
    middlewares: list[Middleware] = [_middleware]
    if auth is not None:
        operations = {
            (r.method, r.path): NativeOperation(r.operation_id, *r.need) for r in routes
        } | {k: NativeOperation(op) for k, op in KEY_OPERATIONS.items()}  # admin, cluster
        operations[("GET", STREAM_PATH)] = NativeOperation("openStream", SIGNED)
        middlewares.append(auth_middleware(auth, operations))
    app = web.Application(client_max_size=max_request_bytes, middlewares=middlewares)
    http_metrics = HttpMetrics(registry)
    app[SERVICE_KEY] = service
    app[REGISTRY_KEY] = registry
    app[HTTP_METRICS_KEY] = http_metrics
    app[MAX_REQUEST_BYTES_KEY] = max_request_bytes
    openapi = _encoder.encode(openapi_document(routes))
    app[SERVED_KEY] = Served(service, http_metrics, openapi, leader_hint)
    for route in routes:  # GET routes get no implicit HEAD: probes use GET
        app.router.add_route(route.method, route.path, _handler(route))
    _add_stream(
        app.router, service, max_request_bytes, auth, subscriptions, leader_hint=leader_hint
    )
    _add_console(app.router)
    if keys is not None:
        add_key_routes(app, keys)
    if sqs is not None:
        SqsHandler(service, sqs, max_request_bytes).add_routes(app)
    return app


UI_DIR = Path(__file__).parent / "ui" / "static"
"""The web console's files (`api.ui`), served under `CONSOLE_PREFIX`."""
CONSOLE_PREFIX = "/ui"
"""Where the web console lives: HTML and static files, not part of the JSON API (so not in the
OpenAPI document)."""


def _add_stream(
    router: web.UrlDispatcher,
    service: QueueService,
    max_bytes: int,
    auth: AuthConfig | None,
    subscriptions: Subscriptions | None,
    *,
    leader_hint: LeaderHint | None,
) -> None:
    """``GET /v1/stream``: the streaming protocol (`api.stream`), a WebSocket beside the JSON
    API (its frames are specified in ``docs/api.md``). With ``auth``, the upgrade request is
    verified like any other and each frame is checked against the key's grants. Its answers
    carry ``leader_hint``'s address as the HTTP answers carry ``Cmq-Leader``."""

    async def stream(request: web.Request) -> web.StreamResponse:
        authorize = None
        if auth is not None:
            key_id = request[PRINCIPAL]

            def authorize(kind: str, queue: str) -> bool:
                grants = auth.keys.grants_of(key_id) or ()
                return allowed(grants, STREAM_ACTIONS[kind], queue)

        return await stream_handler(
            request, service, max_bytes, authorize, subscriptions, leader_of=leader_hint
        )

    router.add_get(STREAM_PATH, stream, allow_head=False)


def _add_console(router: web.UrlDispatcher) -> None:
    """``/ui`` (redirect) and ``/ui/`` (the page), and its static files under ``/ui/``."""

    async def redirect(_: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/")

    async def page(_: web.Request) -> web.StreamResponse:
        return web.FileResponse(UI_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    router.add_get(CONSOLE_PREFIX, redirect, allow_head=False)
    router.add_get(f"{CONSOLE_PREFIX}/", page, allow_head=False)
    router.add_static(f"{CONSOLE_PREFIX}/", UI_DIR, append_version=False)


def _handler(route: Route) -> Handler:
    """The aiohttp handler of ``route``: the queue name is checked before the body is read, and
    the body is decoded before the service is called (a bad request never reaches it)."""
    model = route.request

    async def handle(request: web.Request) -> web.StreamResponse:
        name = check_queue_name(request.match_info["name"]) if route.names_queue else ""
        if model is not None:
            body = decode(await _read_body(request), model)
        elif route.query is not None:
            body = _query(request, route.query)
        else:
            body = None
        params = {k: v for k, v in request.match_info.items() if k != "name"}
        served = request.app[SERVED_KEY]
        caller = request.get(CALLER)
        accept = request.headers.get("Accept", "")
        ctx = Context(served, request.path, name, params, dict(request.query), caller, accept)
        reply = await route.handler(ctx, body)
        if reply.stream is not None:
            return await _stream(request, reply)
        response = _response(reply)
        if name and served.leader_hint is not None:
            leader = served.leader_hint(name)
            if leader:
                response.headers[LEADER_HEADER] = leader
        return response

    return handle


def _query(request: web.Request, model: type[msgspec.Struct]) -> msgspec.Struct:
    """The query string as ``model`` (numbers from their text); `InvalidParameter` naming
    what is wrong."""
    try:
        return msgspec.convert(dict(request.query), model, strict=False)
    except msgspec.ValidationError as e:
        raise InvalidParameter(f"query parameters: {e}") from None


async def _read_body(request: web.Request) -> bytes:
    """The body, refusing more than the request cap before reading it when Content-Length says
    so, and while reading otherwise (chunked)."""
    limit = request.app[MAX_REQUEST_BYTES_KEY]
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(limit) from None


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"request bodies are limited to {limit} bytes")


def _response(reply: Reply) -> web.Response:
    body = reply.body if isinstance(reply.body, bytes) else _encoder.encode(reply.body)
    return web.Response(
        body=body, status=reply.status, headers=reply.headers, content_type=reply.content_type
    )


async def _stream(request: web.Request, reply: Reply) -> web.StreamResponse:
    """Send ``reply`` chunked: its body, then every chunk of its stream. A failure once the
    answer started cannot become an error answer: it ends the body early (the stream's format
    lets the reader notice) and is logged."""
    assert reply.stream is not None
    response = web.StreamResponse(status=reply.status, headers=reply.headers)
    if reply.content_type is not None:
        response.content_type = reply.content_type
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        if reply.body:
            await response.write(reply.body if isinstance(reply.body, bytes) else b"")
        async for chunk in reply.stream:
            await response.write(chunk)
    except (ConnectionResetError, CmqError) as e:
        log.warning("%s %s: stream ended early: %s", request.method, request.path, e)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


def _error_response(rendered: RenderedError) -> web.Response:
    return web.Response(
        body=rendered.body,
        status=rendered.status,
        headers=rendered.headers,
        content_type="application/json",
    )


async def _handle_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes a JSON error; unexpected ones are logged, never shown."""
    try:
        return await handler(request)
    except CmqError as e:
        if is_server_fault(e):
            log.error(
                "%s %s failed: %s",
                request.method,
                request.path,
                e,
                exc_info=True,
                extra={"event": "request_failed"},
            )
        return _error_response(render_error(e))
    except web.HTTPRequestEntityTooLarge:
        return _error_response(render_error(_too_large(request.app[MAX_REQUEST_BYTES_KEY])))
    except web.HTTPException as e:
        if e.status == 404:
            return _error_response(render_error(NotFound(f"no route for {request.path}")))
        if e.status == 405:
            response = _error_response(
                render_error(MethodNotAllowed(f"{request.method} is not allowed here"))
            )
            if "Allow" in e.headers:
                response.headers["Allow"] = e.headers["Allow"]
            return response
        if e.status < 400:
            raise
        code = "".join(e.reason.split()) or "HttpError"
        return _error_response(RenderedError(e.status, {}, error_body(code, e.reason)))
    except Exception:
        log.exception(
            "%s %s failed unexpectedly",
            request.method,
            request.path,
            extra={"event": "request_failed"},
        )
        return _error_response(render_internal())


@web.middleware
async def _middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one middleware (each layer costs on every request): errors rendered as JSON
    (`_handle_errors`), then counted and timed by route template."""
    http_metrics = request.app[HTTP_METRICS_KEY]
    resource = request.match_info.route.resource
    route = UNMATCHED_ROUTE if resource is None else resource.canonical
    method = request.method if request.method in _KNOWN_METHODS else "OTHER"
    status = 499  # the client went away before an answer (the handler was cancelled)
    started = time.perf_counter()
    http_metrics.in_flight.inc()
    try:
        response = await _handle_errors(request, handler)
        status = response.status
        return response
    finally:
        http_metrics.in_flight.dec()
        http_metrics.observe(route, method, status, time.perf_counter() - started)
