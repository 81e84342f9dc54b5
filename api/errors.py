"""Errors of the HTTP layer and how every error is rendered. No aiohttp here: `render_error`
returns status, headers and body bytes, and `api.app` wraps them in a response.

Every error reaches the client as ``{"error": {"code": ..., "message": ...}}`` with the error's
HTTP status, plus ``Retry-After`` (whole seconds, rounded up) when the error is retriable after
a delay. Errors raised here are all about the request itself (never retriable): the service is
not called when one of them is raised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

from cmq.errors import CmqError, InvalidParameter

INTERNAL_MESSAGE = "internal error; the server log has details"


class InvalidJson(InvalidParameter):
    """The request body is not valid UTF-8 JSON, or not a JSON object."""

    code = "InvalidJson"


class EmptyBatch(InvalidParameter):
    """A batch (messages, receipts, entries) has no entries."""

    code = "EmptyBatch"


class NotFound(CmqError):
    """No route matches the request path (an unknown queue is `QueueNotFound` instead)."""

    code = "NotFound"
    http_status = 404


class MethodNotAllowed(CmqError):
    """The path exists but not with this method."""

    code = "MethodNotAllowed"
    http_status = 405


@dataclass(frozen=True, slots=True)
class RenderedError:
    status: int
    headers: dict[str, str]
    body: bytes


def error_body(code: str, message: str) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message}})


def render_error(error: CmqError) -> RenderedError:
    """``error`` as the client sees it. A 5xx that is not retriable is a server fault: its
    message is replaced by a generic one (the caller logs the original)."""
    message = error.message
    if error.http_status >= 500 and not error.retriable:
        message = INTERNAL_MESSAGE
    headers: dict[str, str] = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(0, math.ceil(error.retry_after)))
    return RenderedError(error.http_status, headers, error_body(error.code, message))


def render_internal() -> RenderedError:
    """An unexpected exception: 500 ``InternalError``; never a traceback."""
    return RenderedError(500, {}, error_body("InternalError", INTERNAL_MESSAGE))
