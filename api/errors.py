"""Errors of the HTTP layer, the HTTP status of every error, and how errors are rendered. No
aiohttp here: `render_error` returns status, headers and body bytes, and `api.app` wraps them in
a response.

`HTTP_STATUS` is the one table from error class to HTTP status (the queue's errors in
`cmq.errors` carry codes, messages and retriability, but no HTTP status); `http_status` looks an
error up by its class and then its base classes, so a new subclass answers like its base until it
is listed. The OpenAPI document lists each status's codes from this table.

Every error reaches the client as ``{"error": {"code": ..., "message": ...}}`` with its HTTP
status, plus ``Retry-After`` (whole seconds, rounded up) when the error is retriable after a
delay. Errors raised here are all about the request itself (never retriable): the service is not
called when one of them is raised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

from cmq.errors import (
    AccessKeyNotFound,
    CmqError,
    CorruptSegment,
    DiskFull,
    FeatureNotEnabled,
    FeatureUnsupported,
    GroupNotFound,
    ImportConflict,
    InvalidParameter,
    InvalidQueueName,
    InvalidTraceContext,
    InvariantBroken,
    MessageTooLarge,
    MissingParameter,
    NewerFormat,
    NewerLayout,
    NodeBusy,
    NodeNotFound,
    OutcomeUnknown,
    Overloaded,
    QueueAlreadyExists,
    QueueNotFound,
    ReceiptInvalid,
    RequestTooLarge,
    SegmentDamaged,
    SegmentNotFound,
    SegmentNotReleased,
    TooManyEntries,
    Unavailable,
    UnreadableFrame,
)

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


class MethodNotAllowed(CmqError):
    """The path exists but not with this method."""

    code = "MethodNotAllowed"


HTTP_STATUS: dict[type[CmqError], int] = {
    InvalidParameter: 400,
    InvalidQueueName: 400,
    InvalidTraceContext: 400,
    MissingParameter: 400,
    InvalidJson: 400,
    EmptyBatch: 400,
    TooManyEntries: 400,
    ReceiptInvalid: 400,
    NewerLayout: 400,
    QueueNotFound: 404,
    NotFound: 404,
    NodeNotFound: 404,
    AccessKeyNotFound: 404,
    GroupNotFound: 404,
    NodeBusy: 409,
    ImportConflict: 409,
    FeatureUnsupported: 409,
    FeatureNotEnabled: 409,
    MethodNotAllowed: 405,
    QueueAlreadyExists: 409,
    SegmentNotFound: 404,
    SegmentNotReleased: 409,
    CorruptSegment: 500,
    MessageTooLarge: 413,
    RequestTooLarge: 413,
    CmqError: 500,
    InvariantBroken: 500,
    NewerFormat: 500,
    SegmentDamaged: 500,
    UnreadableFrame: 500,
    Unavailable: 503,
    OutcomeUnknown: 503,
    Overloaded: 503,
    DiskFull: 507,
}
"""Error class -> HTTP status. Every class a client can meet is listed (the OpenAPI document
names their codes per status); `CmqError` itself is ``InternalError``."""


def status_of(error_class: type[CmqError]) -> int:
    """The HTTP status of ``error_class``: its own entry in `HTTP_STATUS`, else its nearest
    listed base class's."""
    for cls in error_class.__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    raise AssertionError("CmqError is in HTTP_STATUS")  # pragma: no cover


def http_status(error: CmqError) -> int:
    """The HTTP status ``error`` is answered with (see `status_of`)."""
    return status_of(type(error))


@dataclass(frozen=True, slots=True)
class RenderedError:
    status: int
    headers: dict[str, str]
    body: bytes


def error_body(code: str, message: str) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message}})


def is_server_fault(error: CmqError) -> bool:
    """A 5xx that is not retriable: a bug or damaged data, logged and never shown. `DiskFull`
    is none: it states the server's condition (the node logs it once, `cmq.node.diskwatch`),
    and its message tells the client what to expect."""
    return http_status(error) >= 500 and not error.retriable and not isinstance(error, DiskFull)


def render_error(error: CmqError) -> RenderedError:
    """``error`` as the client sees it. A server fault's message is replaced by a generic one
    (the caller logs the original)."""
    message = INTERNAL_MESSAGE if is_server_fault(error) else error.message
    headers: dict[str, str] = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(0, math.ceil(error.retry_after)))
    return RenderedError(http_status(error), headers, error_body(error.code, message))


def render_internal() -> RenderedError:
    """An unexpected exception: 500 ``InternalError``; never a traceback."""
    return RenderedError(500, {}, error_body("InternalError", INTERNAL_MESSAGE))
