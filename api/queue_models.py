"""The typed bodies of a queue's attributes and statistics (field for field the dataclasses of
`cmq.model`): msgspec `Struct`s following the rules of `api.base_models`. Pure: no aiohttp, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

import cmq.model
from api.base_models import NonNegative, QueueName, _attribute, _Request, _Response

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
    ] = []  # noqa: RUF012 - a msgspec Struct copies its defaults
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


__all__ = ["QueueAttributes", "QueueAttributesInput", "QueueStats", "RetryPolicy", "SegmentCounts"]
