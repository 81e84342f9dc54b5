"""The typed bodies of the message routes' answers (sent, received and peeked messages):
msgspec `Struct`s like those of `api.models`, whose rules they follow. Pure: no aiohttp, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Required, TypedDict

from msgspec import UNSET, Meta, Struct, UnsetType

import cmq.export_values
import cmq.model
from api.models import MessageAttributes, NonNegative, _Response

_SEQUENCE_NUMBER = (
    "FIFO queues: the message's sequence number (a decimal string; grows with each message "
    "the queue accepts)."
)


class Sent(_Response, omit_defaults=True):
    id: str
    seq: NonNegative
    sequence_number: (
        Annotated[str, Meta(description=_SEQUENCE_NUMBER + " A deduplicated send: the original's.")]
        | UnsetType
    ) = UNSET

    @classmethod
    def of(cls, m: cmq.model.SentMessage, fifo: bool) -> Sent:
        return cls(id=m.id, seq=m.seq, sequence_number=str(m.seq) if fifo else UNSET)


class SendResponse(_Response):
    messages: list[Sent]


_Stored = cmq.model.ReceivedMessage | cmq.model.PeekedMessage | cmq.export_values.LiveMessage


class _Head(TypedDict, total=False):
    id: Required[str]
    seq: Required[int]
    body: str
    body_base64: bytes


class _Message(_Response, kw_only=True, omit_defaults=True):
    """The first fields of every message an answer shows (received, peeked, exported): its id,
    seq and body. Itself not in the OpenAPI document: each subclass's schema lists these first."""

    id: str
    seq: NonNegative
    body: Annotated[str, Meta(description="Present if sent as body.")] | UnsetType = UNSET
    body_base64: (
        Annotated[bytes, Meta(description="Present if sent as body_base64.")] | UnsetType
    ) = UNSET

    @staticmethod
    def _head(m: _Stored) -> _Head:
        """``m``'s id, seq and body in the form it was sent: ``body`` text when it was sent as
        text (and is UTF-8; a text body that is exceptionally not falls back to base64 rather
        than fail), else ``body_base64`` bytes."""
        if not m.binary:
            try:
                return {"id": m.id, "seq": m.seq, "body": m.body.decode("utf-8")}
            except UnicodeDecodeError:
                pass
        return {"id": m.id, "seq": m.seq, "body_base64": m.body}


class ReceivedMessage(_Message, kw_only=True, omit_defaults=True):
    receipt: Annotated[str, Meta(description="Opaque handle for ack / visibility / nack.")]
    receive_count: Annotated[int, Meta(ge=1)]
    sent_at: Annotated[int, Meta(ge=0, description="Milliseconds since the Unix epoch.")]
    attributes: MessageAttributes
    group_id: (
        Annotated[
            str,
            Meta(description="FIFO queues: the message group; standard queues: the tenant."),
        ]
        | UnsetType
    ) = UNSET
    dedup_id: (
        Annotated[
            str,
            Meta(description="FIFO queues: the deduplication id (or the body's SHA-256, hex)."),
        ]
        | UnsetType
    ) = UNSET
    sequence_number: Annotated[str, Meta(description=_SEQUENCE_NUMBER)] | UnsetType = UNSET
    priority: Annotated[
        int, Meta(ge=0, description="Its priority level (omitted when 0, the lowest).")
    ] = 0

    @classmethod
    def of(cls, m: cmq.model.ReceivedMessage) -> ReceivedMessage:
        return cls(
            **cls._head(m),
            receipt=m.receipt,
            receive_count=m.receive_count,
            sent_at=m.sent_at_ms,
            attributes=dict(m.attributes),
            group_id=UNSET if m.group_id is None else m.group_id,
            dedup_id=UNSET if m.dedup_id is None else m.dedup_id,
            sequence_number=UNSET if m.group_id is None else str(m.seq),
            priority=m.priority,
        )


class PeekQuery(Struct, kw_only=True, forbid_unknown_fields=True):
    """Query parameters of a peek (``?peek=N``)."""

    peek: Annotated[
        int,
        Meta(ge=1, le=cmq.model.MAX_PEEK, description="How many messages at the head to read."),
    ]


class PeekedMessage(_Message, kw_only=True, omit_defaults=True):
    """A message at the head of the queue, read without leasing it (no receipt)."""

    sent_at: Annotated[int, Meta(ge=0, description="Milliseconds since the Unix epoch.")]
    attributes: MessageAttributes

    @classmethod
    def of(cls, m: cmq.model.PeekedMessage) -> PeekedMessage:
        return cls(**cls._head(m), sent_at=m.sent_at_ms, attributes=dict(m.attributes))


class PeekResponse(_Response):
    messages: list[PeekedMessage]


class ReceiveResponse(_Response):
    messages: list[
        Annotated[
            ReceivedMessage,
            Meta(
                extra_json_schema={"oneOf": [{"required": ["body"]}, {"required": ["body_base64"]}]}
            ),
        ]
    ]
