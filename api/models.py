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
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

import cmq.model
from cmq.errors import InvalidParameter
from cmq.model import (
    LIMITS,
    MAX_ACK_BATCH,
    MAX_ATTRIBUTE_NAME,
    MAX_DEDUP_ID,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
    MAX_WAIT_SECONDS,
    QUEUE_NAME,
)
from cmq.stream import RFC3339, deliver_at_ms, rfc3339_ms

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
_DLQ = "Queue that receives messages received max_receive_count times."
_MAX_RECEIVE_COUNT = (
    "Receives before a message is dead-lettered; 0 = no limit. > 0 needs dead_letter_queue."
)
_ARCHIVE = (
    "Keep released segments (every message deleted) until an archive job marks them archived; "
    "false: they are deleted once released. Default false."
)
_FIFO = (
    "A FIFO queue (its name ends in .fifo; fixed at creation): group_id on every send, each "
    "group delivered in order with one receive of it in flight at a time, 5-minute dedup."
)
_CONTENT_DEDUP = "FIFO only: a send without dedup_id is deduplicated by its body's SHA-256."
FifoId = Annotated[str, Meta(pattern=cmq.model.FIFO_ID.pattern)]
AckReceipts = Annotated[list[Receipt], Meta(min_length=1, max_length=MAX_ACK_BATCH)]
NackReceipts = Annotated[list[Receipt], Meta(min_length=1, max_length=MAX_NACK_BATCH)]


class _Request(Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of the request bodies (and their parts): unknown fields are refused."""


class _Response(Struct, forbid_unknown_fields=True):
    """Base of the response bodies (and their parts): a client can rely on the listed fields."""


# ---------------------------------------------------------------------------------------------
# Queue attributes and statistics (field for field the dataclasses of `cmq.model`)

_RETRY = (
    "Retry back-off: a message whose lease expires or that is nacked comes back after "
    "initial_seconds x multiplier^(receives - 1), at most max_seconds (a nack's own longer "
    "delay wins). null: at once. Needs the retry_backoff feature flag."
)


class RetryPolicy(_Request):
    """A queue's retry back-off (see `cmq.model.RetryPolicy`)."""

    initial_seconds: Annotated[int, Meta(ge=1, le=cmq.model.MAX_RETRY_SECONDS)]
    multiplier: Annotated[
        float,
        Meta(
            ge=1,
            le=cmq.model.MAX_RETRY_MULTIPLIER,
            description="Factor per further receive, at most two decimals.",
        ),
    ] = 2.0
    max_seconds: Annotated[int, Meta(ge=1, le=cmq.model.MAX_RETRY_SECONDS)] = 300


_MAX_DELAY = (
    "The longest delay a message may take (delay_seconds or deliver_at), up to 7 days; at "
    "least delay_seconds. Other than 900 needs the long_delays feature flag."
)


_PRIORITIES = (
    "How many priority levels a message may take (1: none): a message's priority is 0 (the "
    "lowest) .. priorities - 1, and a receive takes the highest level with a visible message "
    "first (strict: a sustained higher-level backlog starves the lower levels). Changeable; "
    "messages keep their level. Other than 1 needs the message_priorities feature flag."
)
_RETAIN_ACKED = (
    "Keep acknowledged messages for a rewind until this long after their send (0 .. 14 days); "
    "their segments stay until both this retention and the archive are done. 0: not kept. "
    "Above 0 needs the rewind feature flag."
)


class QueueAttributes(_Response, kw_only=True):
    """A queue's settings, every one of them (see `cmq.model.QueueAttributes`)."""

    visibility_timeout: Annotated[int, _attribute("visibility_timeout")]
    delay_seconds: Annotated[int, _attribute("delay_seconds")]
    message_retention_seconds: Annotated[int, _attribute("message_retention_seconds")]
    max_message_size: Annotated[int, _attribute("max_message_size")]
    receive_wait_seconds: Annotated[int, _attribute("receive_wait_seconds")]
    dead_letter_queue: Annotated[QueueName | None, Meta(description=_DLQ)]
    max_receive_count: Annotated[int, _attribute("max_receive_count", _MAX_RECEIVE_COUNT)]
    archive: Annotated[bool, Meta(description=_ARCHIVE)] = False
    fifo: Annotated[bool, Meta(description=_FIFO)] = False
    content_based_deduplication: Annotated[bool, Meta(description=_CONTENT_DEDUP)] = False
    max_delay_seconds: Annotated[int, _attribute("max_delay_seconds", _MAX_DELAY)] = (
        cmq.model.DEFAULT_MAX_DELAY_SECONDS
    )
    retry: Annotated[RetryPolicy | None, Meta(description=_RETRY)] = None
    priorities: Annotated[int, _attribute("priorities", _PRIORITIES)] = 1
    retain_acked_seconds: Annotated[int, _attribute("retain_acked_seconds", _RETAIN_ACKED)] = 0

    @classmethod
    def of(cls, attributes: cmq.model.QueueAttributes) -> QueueAttributes:
        return msgspec.convert(attributes, cls, from_attributes=True)


class QueueAttributesInput(_Request):
    """Any subset of the attributes; unknown names are rejected."""

    visibility_timeout: Annotated[int, _attribute("visibility_timeout")] | UnsetType = UNSET
    delay_seconds: Annotated[int, _attribute("delay_seconds")] | UnsetType = UNSET
    message_retention_seconds: (
        Annotated[int, _attribute("message_retention_seconds")] | UnsetType
    ) = UNSET
    max_message_size: Annotated[int, _attribute("max_message_size")] | UnsetType = UNSET
    receive_wait_seconds: Annotated[int, _attribute("receive_wait_seconds")] | UnsetType = UNSET
    dead_letter_queue: Annotated[QueueName | None, Meta(description=_DLQ)] | UnsetType = UNSET
    max_receive_count: (
        Annotated[int, _attribute("max_receive_count", _MAX_RECEIVE_COUNT)] | UnsetType
    ) = UNSET
    archive: Annotated[bool, Meta(description=_ARCHIVE)] | UnsetType = UNSET
    fifo: Annotated[bool, Meta(description=_FIFO)] | UnsetType = UNSET
    content_based_deduplication: Annotated[bool, Meta(description=_CONTENT_DEDUP)] | UnsetType = (
        UNSET
    )
    max_delay_seconds: Annotated[int, _attribute("max_delay_seconds", _MAX_DELAY)] | UnsetType = (
        UNSET
    )
    retry: Annotated[RetryPolicy | None, Meta(description=_RETRY)] | UnsetType = UNSET
    priorities: Annotated[int, _attribute("priorities", _PRIORITIES)] | UnsetType = UNSET
    retain_acked_seconds: (
        Annotated[int, _attribute("retain_acked_seconds", _RETAIN_ACKED)] | UnsetType
    ) = UNSET

    def changes(self) -> dict[str, Any]:
        """The attributes given, by name, as JSON values (what
        `QueueAttributes.check_changes` takes)."""
        given = ((f, getattr(self, f)) for f in self.__struct_fields__)
        return {f: msgspec.to_builtins(v) for f, v in given if v is not UNSET}


class SegmentCounts(_Response, kw_only=True):
    """A queue's segments by state on the replica that answered: ``active`` takes appends,
    ``sealed`` still holds live messages, ``released`` (every message deleted) waits for the
    archive, ``archived_pending`` is archived (or released without archive) and its files go at
    that replica's next snapshots."""

    active: NonNegative
    sealed: NonNegative
    released: NonNegative
    archived_pending: NonNegative


class QueueStats(_Response, kw_only=True):
    """A queue's counts, exact at its leader's applied index (see `cmq.model.QueueStats`)."""

    visible: NonNegative
    in_flight: NonNegative
    delayed: NonNegative
    sent_total: NonNegative
    acked_total: NonNegative
    dead_lettered_total: NonNegative
    expired_total: NonNegative
    oldest_age_ms: NonNegative
    segments: SegmentCounts
    disk_bytes: Annotated[int, Meta(ge=0, description="Bytes of the queue's segment files.")]
    oldest_unarchived_ms: Annotated[
        int,
        Meta(
            ge=0,
            description="The archive's backlog: age of the oldest message of a released "
            "segment not yet archived; 0: none (always 0 without archive).",
        ),
    ]
    visible_by_priority: Annotated[
        list[NonNegative],
        Meta(
            description="Queues with priorities > 1: the visible messages at each level, "
            "level 0 (the lowest) first; they add up to visible. Empty otherwise.",
        ),
    ] = []
    tenants: Annotated[
        int,
        Meta(
            ge=0,
            description="Standard queues whose messages have group ids (fair queues): the "
            "tenants with a message ready to be received (the messages without a group id "
            "count as one); 0 otherwise.",
        ),
    ] = 0

    @classmethod
    def of(cls, stats: cmq.model.QueueStats) -> QueueStats:
        return msgspec.convert(stats, cls, from_attributes=True)


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
