"""What a producer sends (`OutgoingMessage`), the rules a send is checked against before it is
proposed and at the queue (`check_send_rules`, `send_refusal` and its parts), and the answers
(`SentMessage`, `SendRefused`). Pure: no I/O, no clocks (times are passed in).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cmq.errors import (
    CmqError,
    InvalidParameter,
    MessageTooLarge,
    MissingParameter,
    error_for,
)
from cmq.model.attributes import QueueAttributes
from cmq.model.limits import MAX_DELAY_SECONDS, MAX_PRIORITY, check_fifo_id, is_fifo_name
from cmq.tracecontext import trace_refusal


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message a producer sends. ``delay_seconds`` None: the queue's default."""

    body: bytes
    binary: bool = False
    """Whether the client sent ``body_base64`` (it is returned the same way)."""
    delay_seconds: int | None = None
    attributes: tuple[tuple[str, str], ...] = ()
    dedup_id: str | None = None
    group_id: str | None = None
    """The message group (FIFO queues: required; standard queues: refused)."""
    deliver_at_ms: int | None = None
    """Deliver no earlier than this (Unix ms; instead of ``delay_seconds``): the node that takes
    the send turns it into a delay from its clock (in the past: none)."""
    ttl_seconds: int | None = None
    """Time to live (1 .. the queue's retention): never delivered once this long has passed
    since the send (decided by the queue's state machine); it then counts as expired."""
    ttl_deadline_ms: int | None = None
    """A time to live given as its deadline (Unix ms; instead of ``ttl_seconds``): what a
    moved message keeps (`cmq.redrive`). The node that takes the send turns it into a time to
    live from its clock, as it does ``deliver_at_ms``; a deadline already passed leaves 1 ms
    (the message expires at once, unseen)."""
    priority: int = 0
    """Priority level: 0 (the lowest, the default) .. the queue's ``priorities`` - 1."""


def check_send_rules(queue: str, messages: list[OutgoingMessage]) -> None:
    """The FIFO rules a send can be checked against before it is proposed, from the queue's
    name alone (the committed attributes decide again in apply): on a FIFO queue every
    message needs a group id (`MissingParameter`) and takes no delay of its own; a standard
    queue's group id names the message's tenant (fair queues) and needs priority 0; ids are
    `FIFO_ID`s; a reserved trace attribute is valid W3C trace context
    (`cmq.tracecontext.trace_refusal`). Raises the first message's refusal."""
    for m in messages:
        refusal = _rule_refusal(queue, m)
        if refusal is not None:
            raise refusal


def _rule_refusal(queue: str, m: OutgoingMessage) -> CmqError | None:
    """`check_send_rules` for one message."""
    if not 0 <= m.priority <= MAX_PRIORITY:
        return InvalidParameter(f"priority must be in [0, {MAX_PRIORITY}]; got {m.priority}")
    if m.attributes and (refused := trace_refusal(m.attributes)) is not None:
        return refused
    fifo = is_fifo_name(queue)
    try:
        if m.group_id is None:
            if fifo:
                return MissingParameter("a FIFO queue's messages need a group_id (MessageGroupId)")
        else:  # a standard queue's: its tenant (fair queues)
            check_fifo_id(m.group_id, "group_id (MessageGroupId)")
            if not fifo and m.priority:
                return InvalidParameter(
                    "a standard queue's message with a group_id (a fair-queue tenant) takes "
                    "priority 0: priorities and tenants do not combine"
                )
        if fifo and m.dedup_id is not None:
            check_fifo_id(m.dedup_id, "dedup_id (MessageDeduplicationId)")
    except InvalidParameter as e:
        return e
    if fifo and (m.delay_seconds is not None or m.deliver_at_ms is not None):
        return InvalidParameter(
            "a FIFO queue takes no per-message delay (DelaySeconds); set the queue's"
        )
    if m.delay_seconds is not None and m.deliver_at_ms is not None:
        return InvalidParameter("give delay_seconds or deliver_at, not both")
    if m.ttl_seconds is not None and m.ttl_deadline_ms is not None:
        return InvalidParameter("give ttl_seconds or a ttl deadline, not both")
    if m.delay_seconds is not None and not 0 <= m.delay_seconds <= MAX_DELAY_SECONDS:
        return InvalidParameter(
            f"delay_seconds must be in [0, {MAX_DELAY_SECONDS}]; got {m.delay_seconds}"
        )
    return None


def delay_refusal(
    m: OutgoingMessage, attributes: QueueAttributes, now_ms: int
) -> InvalidParameter | None:
    """`InvalidParameter` if ``m``'s delay (``delay_seconds``, or ``deliver_at_ms`` from
    ``now_ms``) is longer than the queue's ``max_delay_seconds``, its ``ttl_seconds`` is
    outside 1 .. the queue's retention, or its ``priority`` is not below the queue's
    ``priorities``."""
    levels = attributes.priorities
    if not 0 <= m.priority < levels:
        return InvalidParameter(
            f"priority must be in [0, {levels - 1}] (the queue's priorities is {levels}); "
            f"got {m.priority}"
        )
    retention = attributes.message_retention_seconds
    if m.ttl_seconds is not None and not 1 <= m.ttl_seconds <= retention:
        return InvalidParameter(
            f"ttl_seconds must be in [1, the queue's message_retention_seconds ({retention})]; "
            f"got {m.ttl_seconds}"
        )
    limit = attributes.max_delay_seconds
    if m.delay_seconds is not None and m.delay_seconds > limit:
        return InvalidParameter(
            f"delay_seconds {m.delay_seconds} exceeds the queue's max_delay_seconds ({limit})"
        )
    if m.deliver_at_ms is not None and m.deliver_at_ms - now_ms > limit * 1000:
        return InvalidParameter(
            f"deliver_at is {(m.deliver_at_ms - now_ms) / 1000:.0f} s away; the queue's "
            f"max_delay_seconds is {limit}"
        )
    return None


def within_retention(
    m: OutgoingMessage, attributes: QueueAttributes, now_ms: int
) -> OutgoingMessage:
    """``m`` with a ``ttl_deadline_ms`` farther than the queue's retention from ``now_ms``
    brought within it (a moved message whose deadline its new queue's retention would outlast:
    the retention would expire it by then all the same, and the state machine takes no longer
    time to live); ``m`` itself otherwise."""
    limit = now_ms + attributes.message_retention_seconds * 1000
    if m.ttl_deadline_ms is None or m.ttl_deadline_ms <= limit:
        return m
    return replace(m, ttl_deadline_ms=limit)


def size_refusal(m: OutgoingMessage, attributes: QueueAttributes) -> MessageTooLarge | None:
    """`MessageTooLarge` if ``m``'s body is above the queue's ``max_message_size``."""
    if len(m.body) <= attributes.max_message_size:
        return None
    return MessageTooLarge(
        f"a message body has {len(m.body)} bytes; the queue allows {attributes.max_message_size}"
    )


def send_refusal(queue: str, m: OutgoingMessage, attributes: QueueAttributes) -> CmqError | None:
    """Why ``queue`` (with ``attributes``) refuses ``m`` in a send, or None: the rules of
    `check_send_rules`, the size limit (`MessageTooLarge`), and on a FIFO queue without
    content-based deduplication a deduplication id (`InvalidParameter`). The committed
    attributes decide again when the send is applied."""
    refusal = _rule_refusal(queue, m) or size_refusal(m, attributes)
    dedup = attributes.content_based_deduplication or m.dedup_id is not None
    if refusal is None and attributes.fifo and not dedup:
        refusal = InvalidParameter(
            "the queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId (dedup_id) provided explicitly"
        )
    return refusal


@dataclass(frozen=True, slots=True)
class SentMessage:
    """The confirmation of one sent message (returned only after commit). ``seq`` is also a
    FIFO message's sequence number; a deduplicated send gets the original's id and seq."""

    id: str
    seq: int


@dataclass(frozen=True, slots=True)
class SendRefused:
    """A message a per-entry send (`QueueService.send_each`) left out, in
    its place among the answers: the code and message of the error (`send_refusal`) that
    would have refused a whole send."""

    code: str
    message: str

    @staticmethod
    def of(error: CmqError) -> SendRefused:
        return SendRefused(error.code, error.message)

    def error(self) -> CmqError:
        """The refusal as the error a whole send raises for it."""
        return error_for(self.code, self.message)


__all__ = [
    "OutgoingMessage",
    "SendRefused",
    "SentMessage",
    "check_send_rules",
    "delay_refusal",
    "send_refusal",
    "size_refusal",
    "within_retention",
]
