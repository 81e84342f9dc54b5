"""The aiohttp application of the native JSON API: thin routes (parse → service → render), an
error middleware that renders every failure as JSON, and a metrics middleware.

The only thing called here is the `QueueService` protocol: queue logic lives behind it, so an
SQS surface can be mounted next to these routes on the same service later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from api import schemas
from api.errors import (
    MethodNotAllowed,
    NotFound,
    RenderedError,
    render_error,
    render_internal,
)
from api.metrics import UNMATCHED_ROUTE, HttpMetrics
from api.openapi import openapi_document
from cmq.errors import CmqError, RequestTooLarge
from cmq.service import QueueService

log = logging.getLogger(__name__)

SERVICE_KEY = web.AppKey("cmq.service", QueueService)
"""The `QueueService` the routes call."""
REGISTRY_KEY = web.AppKey("cmq.registry", CollectorRegistry)
"""The Prometheus registry ``/metrics`` renders; other components register collectors in it."""
HTTP_METRICS_KEY = web.AppKey("cmq.http_metrics", HttpMetrics)
MAX_REQUEST_BYTES_KEY = web.AppKey("cmq.max_request_bytes", int)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def make_app(
    service: QueueService,
    *,
    registry: CollectorRegistry | None = None,
    max_request_bytes: int = schemas.MAX_REQUEST_BYTES,
) -> web.Application:
    """The native API on ``service``. ``registry`` receives the HTTP metrics and is what
    ``/metrics`` renders (a fresh one when None, never the process-global default, so several
    apps can live in one process). Request bodies above ``max_request_bytes`` get 413."""
    registry = CollectorRegistry() if registry is None else registry
    app = web.Application(
        client_max_size=max_request_bytes,
        middlewares=[_middleware],
    )
    app[SERVICE_KEY] = service
    app[REGISTRY_KEY] = registry
    app[HTTP_METRICS_KEY] = HttpMetrics(registry)
    app[MAX_REQUEST_BYTES_KEY] = max_request_bytes
    spec = orjson.dumps(openapi_document())

    async def openapi_json(request: web.Request) -> web.Response:
        return web.Response(body=spec, content_type="application/json")

    q = "/v1/queues/{name}"
    m = f"{q}/messages"
    app.add_routes(
        [
            web.get("/v1/queues", list_queues, allow_head=False),
            web.put(q, create_queue),
            web.get(q, get_queue, allow_head=False),
            web.patch(q, set_attributes),
            web.delete(q, delete_queue),
            web.post(f"{q}/purge", purge),
            web.post(m, send),
            web.post(f"{m}/receive", receive),
            web.post(f"{m}/ack", ack),
            web.post(f"{m}/visibility", change_visibility),
            web.post(f"{m}/nack", nack),
            web.get("/v1/status", cluster_status, allow_head=False),
            web.get("/healthz", healthz, allow_head=False),
            web.get("/readyz", readyz, allow_head=False),
            web.get("/metrics", metrics, allow_head=False),
            web.get("/openapi.json", openapi_json, allow_head=False),
        ]
    )
    return app


# ---------------------------------------------------------------------------------------------
# Queue routes


async def create_queue(request: web.Request) -> web.Response:
    name = _queue_name(request)
    attributes = schemas.parse_create(await _read_body(request))
    created = await request.app[SERVICE_KEY].create_queue(name, attributes)
    body = schemas.render_created(name, attributes, created)
    if created:
        return _json(body, status=201, headers={"Location": f"/v1/queues/{name}"})
    return _json(body)


async def list_queues(request: web.Request) -> web.Response:
    names = await request.app[SERVICE_KEY].list_queues()
    return _json(schemas.render_queue_list(names))


async def get_queue(request: web.Request) -> web.Response:
    name = _queue_name(request)
    attributes, stats = await request.app[SERVICE_KEY].get_queue(name)
    return _json(schemas.render_queue(name, attributes, stats))


async def set_attributes(request: web.Request) -> web.Response:
    name = _queue_name(request)
    changes = schemas.parse_set_attributes(await _read_body(request))
    attributes = await request.app[SERVICE_KEY].set_attributes(name, changes)
    return _json(schemas.render_attributes(name, attributes))


async def delete_queue(request: web.Request) -> web.Response:
    name = _queue_name(request)
    schemas.parse_no_fields(await _read_body(request))
    await request.app[SERVICE_KEY].delete_queue(name)
    return _json(schemas.render_deleted(name))


async def purge(request: web.Request) -> web.Response:
    name = _queue_name(request)
    schemas.parse_no_fields(await _read_body(request))
    count = await request.app[SERVICE_KEY].purge(name)
    return _json(schemas.render_purged(count))


# ---------------------------------------------------------------------------------------------
# Message routes


async def send(request: web.Request) -> web.Response:
    name = _queue_name(request)
    messages = schemas.parse_send(await _read_body(request))
    sent = await request.app[SERVICE_KEY].send(name, messages)
    return _json(schemas.render_sent(sent))


async def receive(request: web.Request) -> web.Response:
    name = _queue_name(request)
    req = schemas.parse_receive(await _read_body(request))
    received = await request.app[SERVICE_KEY].receive(
        name, req.max_messages, req.visibility_timeout, req.wait_seconds
    )
    return _json(schemas.render_received(received))


async def ack(request: web.Request) -> web.Response:
    name = _queue_name(request)
    receipts = schemas.parse_ack(await _read_body(request))
    results = await request.app[SERVICE_KEY].ack(name, receipts)
    return _json(schemas.render_results(results))


async def change_visibility(request: web.Request) -> web.Response:
    name = _queue_name(request)
    entries = schemas.parse_visibility(await _read_body(request))
    results = await request.app[SERVICE_KEY].change_visibility(name, entries)
    return _json(schemas.render_results(results))


async def nack(request: web.Request) -> web.Response:
    name = _queue_name(request)
    req = schemas.parse_nack(await _read_body(request))
    results = await request.app[SERVICE_KEY].nack(name, req.receipts, req.delay_seconds)
    return _json(schemas.render_results(results))


# ---------------------------------------------------------------------------------------------
# Operational routes


async def healthz(request: web.Request) -> web.Response:
    """Liveness: answers while the process can serve HTTP; never consults the cluster."""
    return _json({"status": "ok"})


async def cluster_status(request: web.Request) -> web.Response:
    """This node's view of every Raft group: role, term, leader, commit/applied, follower lag."""
    return _json(request.app[SERVICE_KEY].status())


async def readyz(request: web.Request) -> web.Response:
    try:
        ready = request.app[SERVICE_KEY].is_ready()
    except Exception:
        log.exception("readiness check failed")
        ready = False
    return _json({"ready": ready}, status=200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[HTTP_METRICS_KEY].render()
    return web.Response(body=body, headers={"Content-Type": content_type})


# ---------------------------------------------------------------------------------------------
# Helpers and middlewares


def _queue_name(request: web.Request) -> str:
    return schemas.parse_queue_name(request.match_info["name"])


async def _read_body(request: web.Request) -> schemas.JsonObject | None:
    """The body as a JSON object (None if empty), refusing more than the request cap before
    reading it when Content-Length says so, and while reading otherwise (chunked)."""
    limit = request.app[MAX_REQUEST_BYTES_KEY]
    too_large = RequestTooLarge(f"request bodies are limited to {limit} bytes")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    return schemas.parse_body(raw)


def _json(
    data: schemas.JsonObject, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=schemas.render_json(data),
        status=status,
        headers=headers,
        content_type="application/json",
    )


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
        if e.http_status >= 500 and not e.retriable:
            log.error("%s %s failed: %s", request.method, request.path, e, exc_info=True)
        return _error_response(render_error(e))
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[MAX_REQUEST_BYTES_KEY]
        return _error_response(
            render_error(RequestTooLarge(f"request bodies are limited to {limit} bytes"))
        )
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
        error = CmqError(e.reason)
        error.code = "".join(e.reason.split()) or "HttpError"
        error.http_status = e.status
        return _error_response(render_error(error))
    except Exception:
        log.exception("%s %s failed unexpectedly", request.method, request.path)
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
