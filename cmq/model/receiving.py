"""What a consumer is handed: a leased message (`ReceivedMessage`), a peeked one
(`PeekedMessage`) and the outcome of one settling entry (`EntryResult`). Pure values.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    group_id: str | None = None
    """FIFO queues: the message's group; its deduplication id in ``dedup_id``."""
    dedup_id: str | None = None
    ttl_deadline_ms: int | None = None
    """When its time to live runs out (the queue's time, Unix ms); None: it has none. What
    a move to another queue keeps (`cmq.redrive`)."""
    priority: int = 0
    """Its priority level (0 on a queue without priorities)."""


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


__all__ = ["MAX_PEEK", "EntryResult", "PeekedMessage", "ReceivedMessage"]
