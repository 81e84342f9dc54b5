"""The commands of a data group's state machine: what each asks of `QueueMachine.apply` and the
result it is answered with when it succeeds (its ``result_type``, one of `cmq.fsm.results`;
any command may instead be answered with `CommandFailed`).

Every command is a frozen, slotted dataclass; their byte layout is `cmq.fsm.commands.codec`.
Times (``now_ms``, delays, visibility) are integer milliseconds fixed by the proposer (the
leader); apply never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from cmq.fsm.results import (
    Created,
    Done,
    EntryOutcomes,
    Expired,
    Leased,
    Produced,
    Purged,
    Retimed,
    Rewound,
    SegmentsArchived,
    SegmentsClaimed,
    Tidied,
)
from cmq.model import DEFAULT_SEGMENT_AGE_SECONDS, DEFAULT_SEGMENT_BYTES, QueueAttributes

__all__ = [
    "Ack",
    "ChangeVisibility",
    "ClaimSegments",
    "Command",
    "CreateQueue",
    "DeadLetter",
    "DeleteQueue",
    "Expire",
    "Lease",
    "MarkArchived",
    "Nack",
    "NewMessage",
    "Produce",
    "Purge",
    "Retime",
    "Rewind",
    "SetAttributes",
    "Tidy",
]


@dataclass(frozen=True, slots=True)
class CreateQueue:
    """Create ``name``; idempotent when it exists with equal attributes. The segment limits
    (the proposer's node settings) are recorded with the queue, so every replica seals its
    segments at the same records whatever its own settings."""

    result_type: ClassVar[type[Created]] = Created

    name: str
    attributes: QueueAttributes
    now_ms: int
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_age_ms: int = DEFAULT_SEGMENT_AGE_SECONDS * 1000


@dataclass(frozen=True, slots=True)
class DeleteQueue:
    """Delete ``name`` with all its messages and segment files."""

    result_type: ClassVar[type[Done]] = Done

    name: str


@dataclass(frozen=True, slots=True)
class SetAttributes:
    """Replace the attributes of ``name`` (the full set, already merged and validated)."""

    result_type: ClassVar[type[Done]] = Done

    name: str
    attributes: QueueAttributes


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete every message of ``name``."""

    result_type: ClassVar[type[Purged]] = Purged

    name: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class NewMessage:
    """One message to append. ``delay_ms`` None: the queue's ``delay_seconds``."""

    id: str
    body: bytes
    binary: bool
    attributes: tuple[tuple[str, str], ...]
    delay_ms: int | None
    dedup_id: str | None
    group_id: str | None = None
    """FIFO queues: the message group (required there, refused on a standard queue)."""
    ttl_ms: int | None = None
    """Time to live (flag ``message_ttl``): the message is never delivered once the queue's
    time reaches its send time plus this; it then counts as expired. At most the queue's
    retention."""
    priority: int = 0
    """Priority level (flag ``message_priorities``): 0 (the lowest) .. the queue's
    ``priorities`` - 1; a `Lease` takes the highest level with a visible message first."""


@dataclass(frozen=True, slots=True)
class Produce:
    """Append ``messages`` in order (deduplicated within `DEDUP_WINDOW_MS`)."""

    result_type: ClassVar[type[Produced]] = Produced

    queue: str
    now_ms: int
    messages: tuple[NewMessage, ...]
    tails: tuple[bytes, ...] | None = field(default=None, compare=False)
    """Set by `decode_command`: each message's `cmq.fsm.store.record_tail`, exactly as
    proposed, so apply frames its record without encoding the message again."""
    expect_sent: int | None = None
    """Set: an *import* (a restore from a backup): applied only if the queue has had exactly
    this many messages sent (its ``sent_total``), else refused whole with ``ImportConflict``;
    its messages bypass the deduplication table (neither looked up nor recorded) and may carry
    a delay on a FIFO queue. A restore that is cut and run again finds how far it got."""


@dataclass(frozen=True, slots=True)
class Lease:
    """Lease up to ``max_messages`` visible messages for ``visibility_ms`` (None: queue default).
    ``attempt_id`` (FIFO queues; ignored elsewhere): a retried receive with the same id within
    5 minutes gets the same messages and leases while they are all still in flight."""

    result_type: ClassVar[type[Leased]] = Leased

    queue: str
    now_ms: int
    max_messages: int
    visibility_ms: int | None
    attempt_id: str | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    """Delete leased messages: entries are ``(seq, lease_id)``."""

    result_type: ClassVar[type[EntryOutcomes]] = EntryOutcomes

    queue: str
    now_ms: int
    entries: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ChangeVisibility:
    """Move the deadline of unexpired leases: entries are ``(seq, lease_id, visibility_ms)``."""

    result_type: ClassVar[type[EntryOutcomes]] = EntryOutcomes

    queue: str
    now_ms: int
    entries: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class Nack:
    """Release unexpired leases; the messages become visible at ``now_ms + delay_ms``."""

    result_type: ClassVar[type[EntryOutcomes]] = EntryOutcomes

    queue: str
    now_ms: int
    entries: tuple[tuple[int, int], ...]
    delay_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Delete messages already copied to the dead-letter queue (idempotent)."""

    result_type: ClassVar[type[Done]] = Done

    queue: str
    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Expire:
    """Delete messages older than the queue's retention at ``now_ms``."""

    result_type: ClassVar[type[Expired]] = Expired

    queue: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class ClaimSegments:
    """Claim released segments for archive batch ``batch_id`` until ``now_ms + ttl_ms``: each
    one released and unclaimed, or whose claim expired, or already claimed by this batch."""

    result_type: ClassVar[type[SegmentsClaimed]] = SegmentsClaimed

    queue: str
    now_ms: int
    batch_id: str
    segments: tuple[int, ...]
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class MarkArchived:
    """Forget released segments stored by archive batch ``batch_id`` (their files go on every
    replica): each one unclaimed or claimed by this batch, or whose claim expired."""

    result_type: ClassVar[type[SegmentsArchived]] = SegmentsArchived

    queue: str
    now_ms: int
    batch_id: str
    segments: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Tidy:
    """Segment upkeep at ``now_ms``, decided in apply: seal the active segment once it is
    older than the queue's segment age, and copy the few live messages of sparse sealed
    segments forward (so they can be released)."""

    result_type: ClassVar[type[Tidied]] = Tidied

    queue: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class Retime:
    """The queue's time is ahead of the leader's clock ``now_ms`` (a stamp from a clock that
    was far ahead got in): from now on the queue's time runs on from where it is at the rate
    of the leaders' clocks, and slews back towards them (`cmq.fsm.queuetime.QueueTime.advance`),
    instead of standing still until real time catches up. Never moves the time back."""

    result_type: ClassVar[type[Retimed]] = Retimed

    queue: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class Rewind:
    """Make every acknowledged message of ``queue`` sent at or after ``since_ms`` that is
    still retained (its send at most the queue's ``retain_acked_seconds`` before the queue's
    time, its record still stored) deliverable once more, as a new message (receive count 0)
    that the archive never writes (`cmq.fsm.rewind`). Resumable: only messages whose seq is at
    least ``from_seq``, at most ``limit`` of them; the result says where the next one starts."""

    result_type: ClassVar[type[Rewound]] = Rewound

    queue: str
    now_ms: int
    since_ms: int
    from_seq: int = 0
    limit: int = 1024


Command = (
    CreateQueue
    | DeleteQueue
    | SetAttributes
    | Purge
    | Produce
    | Lease
    | Ack
    | ChangeVisibility
    | Nack
    | DeadLetter
    | Expire
    | ClaimSegments
    | MarkArchived
    | Tidy
    | Retime
    | Rewind
)
