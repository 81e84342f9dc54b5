"""The OpenAPI 3.1 description of the native JSON API, built from the route table (served at
``/openapi.json``). Pure: no aiohttp.

Nothing here restates the contract: paths, methods, summaries and responses come from
`api.routes.ROUTES`; body schemas are msgspec's JSON Schema of the models in `api.models`
(limits from `cmq.model`); the error codes of each status come from `api.errors.HTTP_STATUS`.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import msgspec

from api.auth.access import OPEN_OPERATIONS
from api.errors import HTTP_STATUS, status_of
from api.models import MAX_REQUEST_BYTES, Error
from api.routes import ROUTES
from api.routing import Route
from cmq.errors import CmqError
from cmq.model import QUEUE_NAME
from cmq.stream import STREAM_PATH

Schema = dict[str, Any]

REF = "#/components/schemas/{name}"

ERROR_RESPONSES: dict[int, tuple[str, str]] = {
    400: ("BadRequest", "The request is malformed; nothing changed"),
    404: ("NotFound", "The queue, segment (or route) does not exist"),
    405: ("MethodNotAllowed", "The path does not support this method"),
    409: (
        "Conflict",
        "The queue exists with different attributes, or the segment is not released",
    ),
    413: ("TooLarge", "A message or the request body is too large"),
    429: ("TooManyRequests", "Rate limited; retry after Retry-After seconds"),
    500: ("Internal", "Unexpected server error (details are in the server log)"),
    503: (
        "Unavailable",
        "No leader reachable, overloaded, or (OutcomeUnknown) a change whose outcome is unknown; "
        "retry after Retry-After seconds",
    ),
    507: (
        "InsufficientStorage",
        "DiskFull: the leader of the queue's group is below its disk reserve; the send was "
        "refused and nothing changed (receives and acks still work)",
    ),
}
"""Status -> (response component name, description). Each status's codes are listed from
`api.errors.HTTP_STATUS`; 429 is reserved for rate limiting (no error uses it yet)."""

RETRY_AFTER_STATUSES = frozenset(
    {429} | {status for cls, status in HTTP_STATUS.items() if cls.retry_after is not None}
)
"""Statuses whose answers carry ``Retry-After``."""


def codes_by_status() -> dict[int, list[str]]:
    """Every error code a client can meet, by HTTP status (from `api.errors.HTTP_STATUS`)."""
    codes: dict[int, list[str]] = defaultdict(list)
    for cls, status in HTTP_STATUS.items():
        if cls.code not in codes[status]:
            codes[status].append(cls.code)
    return dict(codes)


def _ref(name: str) -> Schema:
    return {"$ref": REF.format(name=name)}


def _error_response(status: int, description: str, codes: list[str]) -> Schema:
    listed = ", ".join(codes) if codes else "(reserved for rate limiting; carries Retry-After)"
    response: Schema = {
        "description": f"{description}. Codes: {listed}.",
        "content": {"application/json": {"schema": _ref(Error.__name__)}},
    }
    if status in RETRY_AFTER_STATUSES:
        response["headers"] = {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}}
    return response


def _error_statuses(errors: tuple[type[CmqError], ...]) -> list[int]:
    return sorted({status_of(cls) for cls in errors})


def _operation(route: Route) -> Schema:
    responses: Schema = {}
    for response in route.responses:
        schema = _ref(response.model.__name__) if response.model else dict(response.schema or {})
        responses[str(response.status)] = {
            "description": response.description,
            "content": {response.media_type: {"schema": schema}},
        }
    for status in _error_statuses(route.errors):
        responses[str(status)] = {"$ref": f"#/components/responses/{ERROR_RESPONSES[status][0]}"}
    op: Schema = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "responses": dict(sorted(responses.items())),
    }
    if route.description:
        op["description"] = route.description
    if route.operation_id not in OPEN_OPERATIONS:  # the grant a key needs (docs/api.md)
        action, on_queue = route.need
        op["x-cmq-grant"] = {"action": action, "on": "queue" if on_queue else "cluster"}
    params: list[Schema] = []
    if route.names_queue:
        params.append({"$ref": "#/components/parameters/QueueName"})
    params.extend(dict(p) for p in route.parameters)
    if route.query is not None:
        _, components = msgspec.json.schema_components([route.query])
        fields = components[route.query.__name__]
        for name, schema in fields["properties"].items():
            param: Schema = {"name": name, "in": "query", "schema": schema}
            param["required"] = name in fields.get("required", [])
            if "description" in schema:
                param["description"] = schema["description"]
            params.append(param)
    if "{node}" in route.path:
        params.append({"$ref": "#/components/parameters/NodeId"})
    if "{group}" in route.path:
        params.append({"$ref": "#/components/parameters/GroupId"})
    if params:
        op["parameters"] = params
    if route.request is not None:
        op["requestBody"] = {
            "required": route.request_required,
            "content": {"application/json": {"schema": _ref(route.request.__name__)}},
        }
    return op


def _models(routes: Sequence[Route]) -> list[type[msgspec.Struct]]:
    models: list[type[msgspec.Struct]] = [Error]
    for route in routes:
        if route.request is not None:
            models.append(route.request)
        models.extend(r.model for r in route.responses if r.model is not None)
    return list(dict.fromkeys(models))


def _schemas(routes: Sequence[Route]) -> dict[str, Schema]:
    _, components = msgspec.json.schema_components(_models(routes), ref_template=REF)
    for schema in components.values():
        if "description" in schema:  # a class docstring: drop its indentation
            schema["description"] = inspect.cleandoc(schema["description"])
    return components


_STREAM_OPERATION: Schema = {
    "operationId": "openStream",
    "summary": "Open a stream (WebSocket)",
    "description": (
        "Upgrades to a WebSocket carrying the streaming protocol: binary MessagePack frames for "
        "sends with publisher confirms, subscriptions pushing leased messages within a granted "
        "credit, acks and nacks; the same guarantees and error codes as the HTTP calls. The "
        "frames are specified in docs/api.md (Streaming protocol)."
    ),
    "responses": {
        "101": {"description": "Switching Protocols: the stream is open."},
        "400": {
            "description": "Not a WebSocket upgrade request (BadRequest).",
            "content": {"application/json": {"schema": _ref(Error.__name__)}},
        },
    },
}


def openapi_document(routes: Sequence[Route] = ROUTES) -> dict[str, Any]:
    """The whole OpenAPI 3.1 document of ``routes`` (a fresh dict on every call)."""
    paths: dict[str, Schema] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    paths[STREAM_PATH] = {"get": _STREAM_OPERATION}
    codes = codes_by_status()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cmq native API",
            "version": "1",
            "description": (
                "A Raft-replicated reliable message queue. Sends and acks return only after "
                "they are committed on a majority of fsynced replicas. Request bodies are JSON "
                'objects; unknown fields, wrong types (true/1.0/"1" where an integer is '
                "expected), out-of-range values and malformed JSON get a 4xx and change "
                f"nothing. Request bodies over {MAX_REQUEST_BYTES} bytes get 413 "
                "RequestTooLarge. Optional fields may be omitted or null (the default)."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": _schemas(routes),
            "parameters": {
                "QueueName": {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": QUEUE_NAME.pattern},
                },
                "NodeId": {
                    "name": "node",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 1},
                },
                "GroupId": {
                    "name": "group",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 1},
                },
            },
            "headers": {
                "RetryAfter": {
                    "description": "Seconds to wait before retrying.",
                    "schema": {"type": "integer", "minimum": 0},
                }
            },
            "responses": {
                name: _error_response(status, description, codes.get(status, []))
                for status, (name, description) in ERROR_RESPONSES.items()
            },
        },
    }
