"""What `cmq.client` sends and returns, and their JSON wire forms (the contract of
``docs/api.md``). Pure: no I/O.

Results reuse the queue's own values where they fit (`SentMessage`, `EntryResult`,
`QueueAttributes`, `QueueStats` from `cmq.model`); a received message is `ReceivedMessage`
below, whose body stays in the form it was sent (text or bytes) so a text body costs no
conversion.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cmq.client.tracing import extract, with_trace
from cmq.model import EntryResult, QueueAttributes, QueueStats, SegmentCounts, SentMessage

if TYPE_CHECKING:
    from opentelemetry.context import Context

Json = dict[str, Any]

_ATTRIBUTE_NAMES = frozenset(f.name for f in fields(QueueAttributes))
_STATS_NAMES = frozenset(f.name for f in fields(QueueStats))
_SEGMENT_COUNT_NAMES = frozenset(f.name for f in fields(SegmentCounts))


@dataclass(frozen=True, slots=True)
class Message:
    """One message to send. ``body`` as text (sent as ``body``, stored as UTF-8) or bytes (sent
    as ``body_base64`` and received back as bytes). ``delay_seconds`` None: the queue's.
    ``dedup_id``: a resend with the same id within 5 minutes is not stored twice; a send whose
    messages all carry one may be retried after an unknown outcome. ``group_id``: FIFO queues
    (required there, where every send is deduplicated: by ``dedup_id``, or by the body's SHA-256
    on a queue with ``content_based_deduplication``); on a standard queue optional, the
    message's tenant (fair queues: receives go round-robin over tenants; priority 0 only)."""

    body: str | bytes
    delay_seconds: int | None = None
    attributes: Mapping[str, str] | None = None
    dedup_id: str | None = None
    group_id: str | None = None
    deliver_at: datetime | None = None
    """Deliver no earlier than this (timezone-aware; instead of ``delay_seconds``), at most the
    queue's ``max_delay_seconds`` ahead."""
    ttl_seconds: int | None = None
    """Time to live: never delivered once this long has passed since the send (at most the
    queue's retention); it then counts as expired."""
    priority: int = 0
    """Priority level: 0 (the lowest) .. the queue's ``priorities`` - 1; a receive takes the
    highest level with a visible message first."""


Outgoing = str | bytes | Message
"""What `send` takes per message: a text body, a binary body, or a `Message`."""


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One leased message. ``body`` is text if it was sent as text, bytes if it was sent as
    bytes (or, exceptionally, stored text that is not valid UTF-8)."""

    id: str
    seq: int
    body: str | bytes
    receipt: str
    """Opaque handle for ack / change_visibility / nack."""
    receive_count: int
    sent_at_ms: int
    """When the message was sent, in ms since the Unix epoch (the leader's clock)."""
    attributes: Mapping[str, str]
    group_id: str | None = None
    """FIFO queues: the message's group, deduplication id and sequence number (decimal);
    standard queues: its tenant (``group_id``) when it was sent with one."""
    dedup_id: str | None = None
    sequence_number: str | None = None
    priority: int = 0
    """Its priority level (0 on a queue without priorities)."""

    def trace_context(self) -> Context | None:
        """The producer's trace context (OpenTelemetry, when installed), to start the
        processing span in; None without one (`cmq.client.tracing.extract`)."""
        return extract(self)

    @property
    def data(self) -> bytes:
        """The body as bytes (text bodies UTF-8 encoded)."""
        return self.body.encode() if isinstance(self.body, str) else self.body


@dataclass(frozen=True, slots=True)
class QueueCreated:
    """The answer to `create_queue`: ``created`` False when an identical queue existed."""

    name: str
    created: bool
    attributes: QueueAttributes


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue's attributes and statistics (exact at its leader's applied index)."""

    name: str
    attributes: QueueAttributes
    stats: QueueStats


@dataclass(frozen=True, slots=True)
class RawResponse:
    """An HTTP answer as it came: status, the parsed JSON body (None when empty or not JSON)
    and the raw bytes."""

    status: int
    payload: Any
    body: bytes


# -- wire forms ------------------------------------------------------------------------------------
def message_json(m: Outgoing, trace: Mapping[str, str] | None = None) -> Json:
    """The wire form of one message to send; ``trace``: trace context attributes to add
    (`cmq.client.tracing.current`, added as `cmq.client.tracing.with_trace` says)."""
    if not isinstance(m, Message):
        m = Message(m)
    if isinstance(m.body, str):
        out: Json = {"body": m.body}
    else:
        out = {"body_base64": base64.b64encode(m.body).decode("ascii")}
    if m.delay_seconds is not None:
        out["delay_seconds"] = m.delay_seconds
    if m.deliver_at is not None:
        out["deliver_at"] = m.deliver_at.isoformat()
    if m.ttl_seconds is not None:
        out["ttl_seconds"] = m.ttl_seconds
    if m.priority:
        out["priority"] = m.priority
    attributes = with_trace(m.attributes, trace) if trace else m.attributes
    if attributes:
        out["attributes"] = dict(attributes)
    if m.dedup_id is not None:
        out["dedup_id"] = m.dedup_id
    if m.group_id is not None:
        out["group_id"] = m.group_id
    return out


def all_deduplicated(messages: Sequence[Outgoing]) -> bool:
    """Whether every message carries a ``dedup_id``, or every one a ``group_id`` (a FIFO
    queue deduplicates every send it accepts): a resend then cannot store it twice."""
    return all(isinstance(m, Message) and m.dedup_id for m in messages) or all(
        isinstance(m, Message) and m.group_id for m in messages
    )


def attributes_from_json(data: Mapping[str, Any]) -> QueueAttributes:
    """`QueueAttributes` from an answer (names this client does not know are ignored)."""
    return QueueAttributes(**{k: v for k, v in data.items() if k in _ATTRIBUTE_NAMES})


def stats_from_json(data: Mapping[str, Any]) -> QueueStats:
    values = {k: v for k, v in data.items() if k in _STATS_NAMES}
    if isinstance(values.get("segments"), dict):
        counts = values["segments"]
        values["segments"] = SegmentCounts(
            **{k: v for k, v in counts.items() if k in _SEGMENT_COUNT_NAMES}
        )
    if isinstance(values.get("visible_by_priority"), list):
        values["visible_by_priority"] = tuple(values["visible_by_priority"])
    return QueueStats(**values)


def sent_from_json(payload: Json) -> list[SentMessage]:
    return [SentMessage(m["id"], m["seq"]) for m in payload["messages"]]


def received_from_json(payload: Json) -> list[ReceivedMessage]:
    out = []
    for m in payload["messages"]:
        body = m.get("body")
        if body is None:
            body = base64.b64decode(m["body_base64"])
        out.append(
            ReceivedMessage(
                m["id"],
                m["seq"],
                body,
                m["receipt"],
                m["receive_count"],
                m["sent_at"],
                m.get("attributes") or {},
                m.get("group_id"),
                m.get("dedup_id"),
                m.get("sequence_number"),
                m.get("priority", 0),
            )
        )
    return out


def results_from_json(payload: Json) -> list[EntryResult]:
    return [EntryResult(r["receipt"], r["ok"], r.get("error")) for r in payload["results"]]


__all__ = [
    "EntryResult",
    "Message",
    "Outgoing",
    "QueueAttributes",
    "QueueCreated",
    "QueueInfo",
    "QueueStats",
    "RawResponse",
    "ReceivedMessage",
    "SentMessage",
]
