"""Values shared by the state machine, the node service and the API: queue attributes with their
limits, and what a client sends and receives. Pure: no I/O, no clocks.

Times inside the queue are integer milliseconds since the Unix epoch, always stamped by the
proposer (the leader) and carried in commands, never read during apply.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from cmq.errors import InvalidParameter, InvalidQueueName

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")

MAX_RECEIVE_BATCH = 100
MAX_SEND_BATCH = 100
MAX_ACK_BATCH = 100
MAX_MESSAGE_ATTRIBUTES = 10
MAX_ATTRIBUTE_NAME = 256
MAX_DEDUP_ID = 128
DEDUP_WINDOW_MS = 5 * 60 * 1000
MAX_WAIT_SECONDS = 20


def check_queue_name(name: object) -> str:
    """``name`` if it matches ``^[A-Za-z0-9_-]{1,80}$``, else `InvalidQueueName`."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidQueueName(f"queue names match {QUEUE_NAME.pattern}; got {name!r}")
    return name


# attribute name -> (minimum, maximum, default)
LIMITS: dict[str, tuple[int, int, int]] = {
    "visibility_timeout": (0, 43_200, 30),
    "delay_seconds": (0, 900, 0),
    "message_retention_seconds": (60, 1_209_600, 345_600),
    "max_message_size": (1024, 1_048_576, 262_144),
    "receive_wait_seconds": (0, MAX_WAIT_SECONDS, 0),
    "max_receive_count": (0, 1000, 0),
}


@dataclass(frozen=True, slots=True)
class QueueAttributes:
    """A queue's settings (SQS/CMQ names in snake_case). Defaults as in SQS.

    ``dead_letter_queue`` with ``max_receive_count > 0``: a message received that many times
    is moved to that queue instead of being delivered again. ``max_receive_count == 0`` means
    no limit.
    """

    visibility_timeout: int = 30
    delay_seconds: int = 0
    message_retention_seconds: int = 345_600
    max_message_size: int = 262_144
    receive_wait_seconds: int = 0
    dead_letter_queue: str | None = None
    max_receive_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def merged(self, changes: dict[str, Any]) -> QueueAttributes:
        """These attributes with ``changes`` applied and validated (see `from_dict`)."""
        return QueueAttributes.from_dict({**self.to_dict(), **changes})

    @staticmethod
    def from_dict(data: object) -> QueueAttributes:
        """Validated attributes from a JSON object; unknown names, wrong types and values out of
        range raise `InvalidParameter` naming the field."""
        if data is None:
            return QueueAttributes()
        attrs = replace(QueueAttributes(), **QueueAttributes.check_changes(data))
        if attrs.max_receive_count and not attrs.dead_letter_queue:
            raise InvalidParameter("max_receive_count needs dead_letter_queue")
        return attrs

    @staticmethod
    def check_changes(data: object) -> dict[str, Any]:
        """``data`` checked field by field (names, types, ranges) but not across fields: what a
        partial update (PATCH / SetQueueAttributes) can validate before it knows the current
        attributes. Cross-field rules are checked by `from_dict` / `merged` on the result."""
        if not isinstance(data, dict):
            raise InvalidParameter("attributes must be an object")
        known = {f.name for f in fields(QueueAttributes)}
        for key in data:
            if key not in known:
                raise InvalidParameter(f"unknown attribute {key!r}")
        values: dict[str, Any] = {}
        for key, (lo, hi, _) in LIMITS.items():
            if key in data:
                v = data[key]
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InvalidParameter(f"attribute {key} must be an integer")
                if not lo <= v <= hi:
                    raise InvalidParameter(f"attribute {key} must be in [{lo}, {hi}]; got {v}")
                values[key] = v
        if "dead_letter_queue" in data:
            dlq = data["dead_letter_queue"]
            if dlq is not None:
                check_queue_name(dlq)
            values["dead_letter_queue"] = dlq
        return values


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message a producer sends. ``delay_seconds`` None: the queue's default."""

    body: bytes
    binary: bool = False
    """Whether the client sent ``body_base64`` (it is returned the same way)."""
    delay_seconds: int | None = None
    attributes: tuple[tuple[str, str], ...] = ()
    dedup_id: str | None = None


@dataclass(frozen=True, slots=True)
class SentMessage:
    """The confirmation of one sent message (returned only after commit)."""

    id: str
    seq: int


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One leased message handed to a consumer."""

    id: str
    seq: int
    body: bytes
    binary: bool
    receipt: str
    receive_count: int
    sent_at_ms: int
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """A message at the head of a queue, read without leasing it (no receipt)."""

    id: str
    seq: int
    body: bytes
    binary: bool
    sent_at_ms: int
    attributes: tuple[tuple[str, str], ...]


MAX_PEEK = 100
"""Most messages one peek returns."""


@dataclass(frozen=True, slots=True)
class EntryResult:
    """The outcome of one ack / visibility change / nack entry."""

    receipt: str
    ok: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts for `GET /v1/queues/{name}` (exact at the leader's applied index)."""

    visible: int = 0
    in_flight: int = 0
    delayed: int = 0
    sent_total: int = 0
    acked_total: int = 0
    dead_lettered_total: int = 0
    expired_total: int = 0
    oldest_age_ms: int = 0


@dataclass(frozen=True, slots=True)
class GroupDigest:
    """A data group's replicated state on one node, hashed (``GET /v1/groups/{group}/digest``):
    replicas that applied the same index must show the same hashes. ``image_sha256`` covers
    the state machine's snapshot image (queues, messages' metadata, leases, dedup window);
    ``segments_sha256`` the bytes of the ``segments`` segment files that image lists, up to
    the sizes it records."""

    group: int
    node: int
    applied: int
    image_sha256: str
    image_bytes: int
    segments_sha256: str
    segments: int
