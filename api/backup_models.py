"""The typed bodies of the backup and restore routes (`api.backup_routes`): msgspec `Struct`s
following the rules of `api.models`. Pure: no aiohttp, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

import cmq.export_values
import cmq.model
from api.message_models import _Message
from api.models import FifoId, MessageAttributes, NonNegative, _Request, _Response
from cmq.model import MAX_DEDUP_ID

_STATE = (
    "visible, in_flight (leased, or awaiting its move to the dead-letter queue) or delayed "
    "(a delayed send, or a nack with a delay)."
)


class ExportQuery(Struct, kw_only=True, forbid_unknown_fields=True):
    """Query parameters of an export page (``?after=&upto=&limit=``)."""

    after: Annotated[int, Meta(ge=0, description="The cursor: messages with a higher seq.")] = 0
    upto: Annotated[
        int,
        Meta(
            ge=0,
            description="The export's bound (the first page's `upto`); 0 on the first page: "
            "the queue's next seq now.",
        ),
    ] = 0
    limit: Annotated[int, Meta(ge=1, le=cmq.export_values.MAX_EXPORT_PAGE)] = (
        cmq.export_values.MAX_EXPORT_PAGE
    )


class LiveMessage(_Message, kw_only=True, omit_defaults=True):
    """A live message of an export, read without leasing it."""

    sent_at: Annotated[int, Meta(ge=0, description="Milliseconds since the Unix epoch.")]
    attributes: MessageAttributes
    state: Annotated[str, Meta(description=_STATE)]
    visible_at: Annotated[
        int, Meta(ge=0, description="In flight or delayed: when it becomes visible (ms); else 0.")
    ] = 0
    receive_count: Annotated[int, Meta(ge=0, description="Leases so far (0: never received).")]
    group_id: (
        Annotated[
            str,
            Meta(
                description="FIFO queues: the message group; standard queues: its tenant "
                "(fair queues), if it has one."
            ),
        ]
        | UnsetType
    ) = UNSET
    dedup_id: Annotated[str, Meta(description="FIFO queues: its deduplication id.")] | UnsetType = (
        UNSET
    )
    ttl_deadline: (
        Annotated[
            int,
            Meta(
                ge=0,
                description="Sent with a time to live: when it runs out (ms since the "
                "Unix epoch, the queue's clock).",
            ),
        ]
        | UnsetType
    ) = UNSET
    priority: Annotated[
        int,
        Meta(
            ge=0,
            le=cmq.model.MAX_PRIORITY,
            description="Its priority level (absent: 0, the lowest).",
        ),
    ] = 0

    @classmethod
    def of(cls, m: cmq.export_values.LiveMessage) -> LiveMessage:
        return cls(
            **cls._head(m),
            sent_at=m.sent_at_ms,
            attributes=dict(m.attributes),
            state=m.state,
            visible_at=m.visible_at_ms,
            receive_count=m.receive_count,
            group_id=UNSET if m.group_id is None else m.group_id,
            dedup_id=UNSET if m.dedup_id is None else m.dedup_id,
            ttl_deadline=UNSET if m.ttl_deadline_ms is None else m.ttl_deadline_ms,
            priority=m.priority,
        )


class ExportResponse(_Response):
    """One page of an export."""

    messages: list[LiveMessage]
    upto: Annotated[int, Meta(ge=0, description="The export's bound: pass it to every page.")]
    next_after: Annotated[
        int | None, Meta(description="The next page's `after`; null: this was the last page.")
    ]
    read_at: Annotated[int, Meta(ge=0, description="The leader's clock at this read (ms).")]

    @classmethod
    def of(cls, page: cmq.export_values.ExportPage) -> ExportResponse:
        return cls(
            [LiveMessage.of(m) for m in page.messages], page.upto, page.next_after, page.read_at_ms
        )


class ImportMessage(_Request):
    """A message to store with its id kept; exactly one of body and body_base64."""

    id: Annotated[str, Meta(min_length=1, max_length=128)]
    body: str | None = None
    body_base64: bytes | None = None
    attributes: MessageAttributes | None = None
    delay_ms: Annotated[
        int,
        Meta(
            ge=0,
            le=cmq.model.MAX_DELAY_SECONDS * 1000,
            description="Invisible this long after the import (ms); or give deliver_at.",
        ),
    ] = 0
    deliver_at: (
        Annotated[
            int,
            Meta(
                ge=0,
                description="Invisible until this time (ms since the Unix epoch, the importing "
                "node's clock; past: visible at once); instead of delay_ms.",
            ),
        ]
        | None
    ) = None
    ttl_deadline: (
        Annotated[
            int,
            Meta(
                ge=0,
                description="Its time to live runs out at this time (ms since the Unix epoch, "
                "the importing node's clock; past: it expires at once, unseen). Needs the "
                "message_ttl feature flag.",
            ),
        ]
        | None
    ) = None
    group_id: (
        Annotated[
            FifoId,
            Meta(
                description="FIFO queues: its message group; standard queues: its tenant (fair "
                "queues; needs the fair_queues feature flag and priority 0)."
            ),
        ]
        | None
    ) = None
    dedup_id: Annotated[str, Meta(min_length=1, max_length=MAX_DEDUP_ID)] | None = None
    priority: Annotated[
        int,
        Meta(
            ge=0,
            le=cmq.model.MAX_PRIORITY,
            description="Its priority level: below the queue's priorities (above 0: needs the "
            "message_priorities feature flag).",
        ),
    ] = 0

    def __post_init__(self) -> None:
        if (self.body is None) == (self.body_base64 is None):
            raise ValueError("needs exactly one of body and body_base64")
        if self.delay_ms and self.deliver_at is not None:
            raise ValueError("give delay_ms or deliver_at, not both")

    def to_model(self) -> cmq.export_values.ImportedMessage:
        binary = self.body_base64 is not None
        body = self.body_base64 if self.body_base64 is not None else (self.body or "").encode()
        return cmq.export_values.ImportedMessage(
            id=self.id,
            body=body,
            binary=binary,
            attributes=() if self.attributes is None else tuple(self.attributes.items()),
            delay_ms=self.delay_ms,
            group_id=self.group_id,
            dedup_id=self.dedup_id,
            deliver_at_ms=self.deliver_at,
            ttl_deadline_ms=self.ttl_deadline,
            priority=self.priority,
        )


class ImportRequest(_Request):
    expect_sent: Annotated[
        int,
        Meta(
            ge=0,
            description="How many messages the queue has had sent so far (its sent_total); "
            "otherwise 409 ImportConflict and nothing is stored.",
        ),
    ]
    messages: Annotated[
        list[ImportMessage], Meta(min_length=1, max_length=cmq.export_values.MAX_IMPORT_BATCH)
    ]


class ImportResponse(_Response):
    imported: NonNegative
    sent_total: Annotated[int, Meta(ge=0, description="The queue's sent_total after it.")]


class CatalogExport(_Response):
    release: Annotated[str, Meta(description="The answering node's cmq release.")]
    sections: Annotated[
        dict[str, Any],
        Meta(
            description="placement, groups, metadata, keys (secrets sealed), and any section a "
            "newer catalog reports (feature_flags)."
        ),
    ]


class GrantImport(_Request):
    pattern: str
    actions: list[str]


class KeyImport(_Request):
    """An access key of a backup: its secret sealed under the cluster secret."""

    access_key_id: Annotated[str, Meta(min_length=1, max_length=64)]
    sealed: Annotated[str, Meta(min_length=1)]
    grants: list[GrantImport]
    created_ms: NonNegative


class CatalogImportRequest(_Request):
    keys: list[KeyImport] = msgspec.field(default_factory=list)
    metadata: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)


class CatalogImportResponse(_Response):
    keys_created: list[str]
    keys_present: list[str]
    metadata: list[str]
