"""The typed HTTP contract of the native JSON API: one msgspec `Struct` per request and response
body. Pure: no aiohttp, no I/O.

These types are the one description of the bodies: `api.decoding` decodes requests into them
(strictly: unknown fields, wrong JSON types and values out of range are refused), the routes
render their results through them, and `api.openapi` emits their JSON Schema. Limits come from
`cmq.model`, so neither the parser nor the document can disagree with the queue about them.

Request rules every request type follows: unknown fields are refused (``forbid_unknown_fields``);
integers are JSON integers (``true``, ``1.0``, ``"1"`` are refused); an optional field may be
omitted or ``null`` (both mean the default); batches are non-empty and within their limit.
Class docstrings and ``description`` metadata are published in the OpenAPI document.

This module holds the queue operations' requests and responses; the bases and shared value
types are `api.base_models`', a queue's attributes and statistics `api.queue_models`' (both
re-exported here).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

import cmq.model
from api.base_models import (
    HINT,
    MAX_NACK_BATCH,
    MAX_REQUEST_BYTES,
    MAX_VISIBILITY_BATCH,
    TOO_MANY,
    AckReceipts,
    DelaySeconds,
    FifoId,
    MessageAttributes,
    NackReceipts,
    NonNegative,
    QueueName,
    Receipt,
    VisibilityTimeout,
    WaitSeconds,
    _Request,
    _Response,
)
from api.queue_models import (
    QueueAttributes,
    QueueAttributesInput,
    QueueStats,
    RetryPolicy,
    SegmentCounts,
)
from cmq.errors import InvalidParameter
from cmq.model import (
    LIMITS,
    MAX_DEDUP_ID,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
)
from cmq.stream import RFC3339, deliver_at_ms, rfc3339_ms

# ---------------------------------------------------------------------------------------------
# Requests


class EmptyRequest(_Request):
    """No fields; the body may be omitted."""


class CreateQueueRequest(_Request):
    """Omitted attributes take their defaults."""

    attributes: QueueAttributesInput | None = None

    def to_model(self) -> cmq.model.QueueAttributes:
        """The complete attributes, checked across fields (`InvalidParameter`)."""
        changes = None if self.attributes is None else self.attributes.changes()
        return cmq.model.QueueAttributes.from_dict(changes)


class SetAttributesRequest(_Request):
    """At least one attribute; the service checks the merged result across fields."""

    attributes: Annotated[QueueAttributesInput, Meta(extra_json_schema={"minProperties": 1})]

    def to_model(self) -> dict[str, Any]:
        """The changes, by attribute name (`InvalidParameter` when there are none)."""
        changes = self.attributes.changes()
        if not changes:
            raise InvalidParameter("attributes must name at least one attribute to change")
        return changes


class OutgoingMessage(_Request):
    """Exactly one of body and body_base64 (the other omitted or null). The body may not
    exceed the queue's max_message_size (413 MessageTooLarge)."""

    body: (
        Annotated[
            str,
            Meta(description="UTF-8 text body.", extra={HINT: "use body_base64 for binary"}),
        ]
        | None
    ) = None
    body_base64: (
        Annotated[
            bytes, Meta(description="Binary body, standard padded base64 without whitespace.")
        ]
        | None
    ) = None
    delay_seconds: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=cmq.model.MAX_DELAY_SECONDS,
                description="null: the queue's delay_seconds. At most the queue's "
                "max_delay_seconds.",
            ),
        ]
        | None
    ) = None
    deliver_at: (
        Annotated[
            str,
            Meta(
                pattern=RFC3339,
                description="Deliver no earlier than this time (RFC 3339, with a zone; "
                "instead of delay_seconds): at most the queue's max_delay_seconds ahead, in "
                "the past: at once.",
            ),
        ]
        | None
    ) = None
    ttl_seconds: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=LIMITS["message_retention_seconds"][1],
                description="Time to live: never delivered once this long has passed since the "
                "send (it then counts as expired); at most the queue's "
                "message_retention_seconds. Needs the message_ttl feature flag.",
            ),
        ]
        | None
    ) = None
    priority: Annotated[
        int,
        Meta(
            ge=0,
            le=cmq.model.MAX_PRIORITY,
            description="Priority level: 0 (the lowest, the default) .. the queue's "
            "priorities - 1; a receive takes the highest level first. Above 0 needs the "
            "message_priorities feature flag.",
        ),
    ] = 0
    attributes: MessageAttributes | None = None
    dedup_id: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=MAX_DEDUP_ID,
                description="A resend with the same dedup_id within 5 minutes is not stored "
                "again; it returns the original id and seq. FIFO queues: printable ASCII.",
            ),
        ]
        | None
    ) = None
    group_id: (
        Annotated[
            FifoId,
            Meta(
                description="FIFO queues: the message group (required there). Standard queues: "
                "the message's tenant (fair queues: receives go round-robin over tenants)."
            ),
        ]
        | None
    ) = None

    def __post_init__(self) -> None:
        if (self.body is None) == (self.body_base64 is None):
            raise ValueError("needs exactly one of body and body_base64")

    def to_model(self) -> cmq.model.OutgoingMessage:
        binary = self.body_base64 is not None
        body = self.body_base64 if self.body_base64 is not None else (self.body or "").encode()
        return cmq.model.OutgoingMessage(
            body=body,
            binary=binary,
            delay_seconds=self.delay_seconds,
            attributes=() if self.attributes is None else tuple(self.attributes.items()),
            dedup_id=self.dedup_id,
            group_id=self.group_id,
            deliver_at_ms=None if self.deliver_at is None else deliver_at_ms(self.deliver_at),
            ttl_seconds=self.ttl_seconds,
            priority=self.priority,
        )


_ONE_BODY = Meta(
    extra_json_schema={
        "oneOf": [
            {"required": ["body"], "properties": {"body": {"type": "string"}}},
            {"required": ["body_base64"], "properties": {"body_base64": {"type": "string"}}},
        ]
    }
)


class SendRequest(_Request):
    messages: Annotated[
        list[Annotated[OutgoingMessage, _ONE_BODY]],
        Meta(min_length=1, max_length=MAX_SEND_BATCH),
    ]


class ReceiveRequest(_Request):
    """Every field is optional; the body may be omitted."""

    max_messages: (
        Annotated[int, Meta(ge=1, le=MAX_RECEIVE_BATCH, extra={TOO_MANY: True})] | None
    ) = 1
    visibility_timeout: (
        Annotated[
            VisibilityTimeout,
            Meta(description="Lease length in seconds; null: the queue's visibility_timeout."),
        ]
        | None
    ) = None
    wait_seconds: (
        Annotated[
            WaitSeconds,
            Meta(
                description="Long poll: wait up to this long for a message; null: the queue's "
                "receive_wait_seconds."
            ),
        ]
        | None
    ) = None
    attempt_id: (
        Annotated[
            FifoId,
            Meta(
                description="FIFO queues: a retry with the same attempt_id within 5 minutes "
                "returns the same messages and receipts while they are all still in flight."
            ),
        ]
        | None
    ) = None


class AckRequest(_Request):
    receipts: AckReceipts


class VisibilityEntry(_Request):
    receipt: Receipt
    visibility_timeout: VisibilityTimeout


class VisibilityRequest(_Request):
    entries: Annotated[list[VisibilityEntry], Meta(min_length=1, max_length=MAX_VISIBILITY_BATCH)]

    def to_model(self) -> list[tuple[str, int]]:
        return [(e.receipt, e.visibility_timeout) for e in self.entries]


class NackRequest(_Request):
    receipts: NackReceipts
    delay_seconds: DelaySeconds | None = 0


# ---------------------------------------------------------------------------------------------
# Responses


class CreateQueueResponse(_Response):
    name: str
    created: bool
    attributes: QueueAttributes


class QueueRef(_Response):
    name: str


class QueueList(_Response):
    queues: list[QueueRef]


class Queue(_Response):
    name: str
    attributes: QueueAttributes
    stats: QueueStats


class QueueAttributesResponse(_Response):
    name: str
    attributes: QueueAttributes


class DeleteQueueResponse(_Response):
    name: str
    deleted: Annotated[bool, Meta(extra_json_schema={"const": True})]


class PurgeResponse(_Response):
    purged: NonNegative


class RewindRequest(_Request):
    since: Annotated[
        str,
        Meta(
            pattern=RFC3339,
            description="Every acknowledged message sent at or after this time (RFC 3339, with "
            "a zone) that the queue still retains (retain_acked_seconds) is delivered once "
            "more.",
        ),
    ]

    def since_ms(self) -> int:
        return rfc3339_ms(self.since, "since")


class RewindResponse(_Response):
    rewound: Annotated[
        int, Meta(ge=0, description="How many acknowledged messages are deliverable again.")
    ]


class Result(_Response, omit_defaults=True):
    receipt: str
    ok: bool
    error: (
        Annotated[
            str,
            Meta(description="ReceiptHandleIsInvalid, LeaseStale, MessageNotInflight, ..."),
        ]
        | None
    ) = None


class ResultsResponse(_Response):
    results: list[Result]

    @classmethod
    def of(cls, results: list[cmq.model.EntryResult]) -> ResultsResponse:
        return cls([Result(r.receipt, r.ok, r.error) for r in results])


class Health(_Response):
    status: Literal["ok"]


class Ready(_Response):
    ready: bool


class ErrorDetail(_Response):
    code: Annotated[str, Meta(description="Machine-readable error code; see the responses.")]
    message: str


class Error(_Response):
    error: ErrorDetail


__all__ = [
    "HINT",
    "MAX_NACK_BATCH",
    "MAX_REQUEST_BYTES",
    "MAX_VISIBILITY_BATCH",
    "TOO_MANY",
    "AckReceipts",
    "AckRequest",
    "CreateQueueRequest",
    "CreateQueueResponse",
    "DelaySeconds",
    "DeleteQueueResponse",
    "EmptyRequest",
    "Error",
    "ErrorDetail",
    "FifoId",
    "Health",
    "MessageAttributes",
    "NackReceipts",
    "NackRequest",
    "NonNegative",
    "OutgoingMessage",
    "PurgeResponse",
    "Queue",
    "QueueAttributes",
    "QueueAttributesInput",
    "QueueAttributesResponse",
    "QueueList",
    "QueueName",
    "QueueRef",
    "QueueStats",
    "Ready",
    "Receipt",
    "ReceiveRequest",
    "Result",
    "ResultsResponse",
    "RetryPolicy",
    "RewindRequest",
    "RewindResponse",
    "SegmentCounts",
    "SendRequest",
    "SetAttributesRequest",
    "VisibilityEntry",
    "VisibilityRequest",
    "VisibilityTimeout",
    "WaitSeconds",
    "_Request",
    "_Response",
]
