"""The typed bodies of the message routes' answers (sent, received and peeked messages):
msgspec `Struct`s like those of `api.models`, whose rules they follow. Pure: no aiohttp, no I/O.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, Struct, UnsetType

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


def _body_fields(body: bytes, binary: bool) -> tuple[str | UnsetType, bytes | UnsetType]:
    """A message body as the API renders it: ``body`` text when it was sent as text (and is
    UTF-8), else ``body_base64`` bytes."""
    if not binary:
        try:
            return body.decode("utf-8"), UNSET
        except UnicodeDecodeError:
            pass
    return UNSET, body


class ReceivedMessage(_Response, kw_only=True, omit_defaults=True):
    id: str
    seq: NonNegative
    body: Annotated[str, Meta(description="Present if sent as body.")] | UnsetType = UNSET
    body_base64: (
        Annotated[bytes, Meta(description="Present if sent as body_base64.")] | UnsetType
    ) = UNSET
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
        """In the form it was sent; a text body that is (exceptionally) not UTF-8 falls back to
        base64 rather than fail."""
        text, raw = _body_fields(m.body, m.binary)
        return cls(
            id=m.id,
            seq=m.seq,
            body=text,
            body_base64=raw,
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


class PeekedMessage(_Response, kw_only=True, omit_defaults=True):
    """A message at the head of the queue, read without leasing it (no receipt)."""

    id: str
    seq: NonNegative
    body: Annotated[str, Meta(description="Present if sent as body.")] | UnsetType = UNSET
    body_base64: (
        Annotated[bytes, Meta(description="Present if sent as body_base64.")] | UnsetType
    ) = UNSET
    sent_at: Annotated[int, Meta(ge=0, description="Milliseconds since the Unix epoch.")]
    attributes: MessageAttributes

    @classmethod
    def of(cls, m: cmq.model.PeekedMessage) -> PeekedMessage:
        text, raw = _body_fields(m.body, m.binary)
        return cls(
            id=m.id,
            seq=m.seq,
            body=text,
            body_base64=raw,
            sent_at=m.sent_at_ms,
            attributes=dict(m.attributes),
        )


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
