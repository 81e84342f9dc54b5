"""The ground of the native JSON API's typed bodies (`api.models` and the other ``api.*_models``):
the request and response bases, the constrained value types they share and the marks
`api.decoding` reads. Pure: no aiohttp, no I/O.

Request rules every request type follows: unknown fields are refused (``forbid_unknown_fields``);
integers are JSON integers (``true``, ``1.0``, ``"1"`` are refused); an optional field may be
omitted or ``null`` (both mean the default); batches are non-empty and within their limit.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

import cmq.model
from cmq.model import (
    LIMITS,
    MAX_ACK_BATCH,
    MAX_ATTRIBUTE_NAME,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_WAIT_SECONDS,
    QUEUE_NAME,
)

MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Largest request body accepted (413 ``RequestTooLarge`` above): a send of ten 1 MiB messages,
base64-inflated, fits; per-message limits are the queue's ``max_message_size``."""

MAX_VISIBILITY_BATCH = MAX_ACK_BATCH
MAX_NACK_BATCH = MAX_ACK_BATCH

TOO_MANY = "too_many"
"""Key of `Meta.extra` marking an integer whose maximum is a batch limit: a value above it is
``TooManyEntries`` rather than ``InvalidParameter`` (see `api.decoding`)."""
HINT = "hint"
"""Key of `Meta.extra`: advice appended to a field's type error (``use body_base64 ...``)."""


def _attribute(name: str, description: str | None = None) -> Meta:
    lo, hi, default = LIMITS[name]
    return Meta(ge=lo, le=hi, description=description, extra_json_schema={"default": default})


def _range(name: str, description: str | None = None) -> Meta:
    lo, hi, _ = LIMITS[name]
    return Meta(ge=lo, le=hi, description=description)


QueueName = Annotated[str, Meta(pattern=QUEUE_NAME.pattern)]
Receipt = Annotated[str, Meta(min_length=1)]
NonNegative = Annotated[int, Meta(ge=0)]
VisibilityTimeout = Annotated[int, _range("visibility_timeout")]
DelaySeconds = Annotated[int, _range("delay_seconds")]
WaitSeconds = Annotated[int, Meta(ge=0, le=MAX_WAIT_SECONDS)]
MessageAttributes = Annotated[
    dict[Annotated[str, Meta(min_length=1, max_length=MAX_ATTRIBUTE_NAME)], str],
    Meta(max_length=MAX_MESSAGE_ATTRIBUTES),
]
FifoId = Annotated[str, Meta(pattern=cmq.model.FIFO_ID.pattern)]
AckReceipts = Annotated[list[Receipt], Meta(min_length=1, max_length=MAX_ACK_BATCH)]
NackReceipts = Annotated[list[Receipt], Meta(min_length=1, max_length=MAX_NACK_BATCH)]


class _Request(Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of the request bodies (and their parts): unknown fields are refused."""


class _Response(Struct, forbid_unknown_fields=True):
    """Base of the response bodies (and their parts): a client can rely on the listed fields."""


__all__ = [
    "HINT",
    "MAX_NACK_BATCH",
    "MAX_REQUEST_BYTES",
    "MAX_VISIBILITY_BATCH",
    "TOO_MANY",
    "AckReceipts",
    "DelaySeconds",
    "FifoId",
    "MessageAttributes",
    "NackReceipts",
    "NonNegative",
    "QueueName",
    "Receipt",
    "VisibilityTimeout",
    "WaitSeconds",
    "_Request",
    "_Response",
    "_attribute",
    "_range",
]
