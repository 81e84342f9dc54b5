"""Moving messages from one queue to another, at least once, over the `QueueService` contract
alone: copy them to the destination with one per-entry send, then delete from the source
exactly those whose copy is stored.

Two moves use it:

* the dead-letter move (`cmq.node.housekeeping`): messages the queue machine marked for the
  queue's dead-letter queue, read on the source's leader, deleted there by a ``DeadLetter``
  command (`copy`);
* the SQS message move tasks (`api.sqs.moves`): messages leased from a dead-letter queue,
  deleted by an ack (`move_batch`).

A copy keeps the body, its binary flag, the attributes and its time-to-live deadline (the
absolute time: a moved message expires when it would have where it was, within the
destination's retention; the node that takes the copy turns the deadline into a time to live
from its clock, so the copy's deadline can be later by how far the destination queue's time
runs ahead of that clock, milliseconds as a rule). It carries a deduplication id made of the
move's ``origin`` and the message's id, so a step repeated after a failure (the copy was
stored, the delete was not) stores nothing twice within the dedup window (5 minutes; a copy is
a new message with an id of its own, so a message moved back and forth is never taken for its
earlier copy). To a FIFO queue a copy keeps its message group (`REDRIVE_GROUP` for a message
that had none); to a standard queue it is visible at once, whatever the destination's delay.
A copy keeps its priority level (a destination with fewer ``priorities`` refuses it, below).
A message the destination refuses (too large for it, say: `cmq.model.send_refusal`) is not
deleted: it stays in the source, and the refusal is reported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from cmq.model import (
    MAX_DEDUP_ID,
    OutgoingMessage,
    ReceivedMessage,
    SendRefused,
    SentMessage,
    is_fifo_name,
)
from cmq.service import QueueService
from cmq.tracecontext import RESERVED as TRACE_ATTRIBUTES
from cmq.tracecontext import trace_refusal

REDRIVE_GROUP = "redrive"
"""The message group of a copy, sent to a FIFO queue, of a message that had none."""


Sender = Callable[[str, list[OutgoingMessage]], Awaitable[list[SentMessage | SendRefused]]]
"""`QueueService.send_each` (a node's own, or any service's)."""


@dataclass(frozen=True, slots=True)
class Moving:
    """A message to move: what its copy keeps (``group_id``: its FIFO message group)."""

    id: str
    body: bytes
    binary: bool
    attributes: tuple[tuple[str, str], ...]
    group_id: str | None = None
    ttl_deadline_ms: int | None = None
    """When its time to live runs out (Unix ms; None: it has none): the copy keeps it."""
    priority: int = 0

    @staticmethod
    def received(m: ReceivedMessage) -> Moving:
        return Moving(
            m.id, m.body, m.binary, m.attributes, m.group_id, m.ttl_deadline_ms, m.priority
        )


def copies(destination: str, messages: Sequence[Moving], origin: str) -> list[OutgoingMessage]:
    """The messages sent to ``destination`` for ``messages`` (see the module docstring)."""
    fifo = is_fifo_name(destination)
    return [
        OutgoingMessage(
            body=m.body,
            binary=m.binary,
            delay_seconds=None if fifo else 0,
            attributes=_movable(m.attributes),
            dedup_id=f"{origin}:{m.id}"[:MAX_DEDUP_ID],
            group_id=(m.group_id or REDRIVE_GROUP) if fifo else None,
            ttl_deadline_ms=m.ttl_deadline_ms,
            priority=m.priority,
        )
        for m in messages
    ]


def _movable(attributes: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A copy's attributes: the original's, less its trace attributes when they are not valid
    trace context (stored before sends were checked: a copy must not be refused for them)."""
    if trace_refusal(attributes) is None:
        return attributes
    return tuple((k, v) for k, v in attributes if k not in TRACE_ATTRIBUTES)


async def copy(
    send: Sender, destination: str, messages: Sequence[Moving], origin: str
) -> list[SentMessage | SendRefused]:
    """Store copies of ``messages`` in ``destination`` (one commit); per message its copy or
    the destination's refusal, in order. Raises what the send raises (nothing is stored
    then, or its outcome is unknown: `OutcomeUnknown`, safe to repeat)."""
    if not messages:
        return []
    return await send(destination, copies(destination, messages, origin))


@dataclass(frozen=True, slots=True)
class Moved:
    """What one `move_batch` did: how many messages were moved, and each refused one's
    refusal (its message left in the source, visible again)."""

    moved: int
    refused: tuple[SendRefused, ...] = ()

    @property
    def done(self) -> bool:
        """Whether the source had nothing to move."""
        return not self.moved and not self.refused


async def move_batch(
    service: QueueService,
    source: str,
    destination: str,
    count: int,
    *,
    lease_seconds: int,
    origin: str,
) -> Moved:
    """Lease up to ``count`` visible messages of ``source`` (for ``lease_seconds``), copy
    them to ``destination``, ack those copied and release (nack) those refused. A failure
    before the ack leaves the leased messages to come back after their lease, when a repeat
    moves them (their copies deduplicated)."""
    leased = await service.receive(source, count, lease_seconds, 0)
    if not leased:
        return Moved(0)
    outcomes = await copy(
        service.send_each, destination, [Moving.received(m) for m in leased], origin
    )
    moved: list[str] = []
    refused: list[tuple[str, SendRefused]] = []
    for m, outcome in zip(leased, outcomes, strict=True):
        if isinstance(outcome, SendRefused):
            refused.append((m.receipt, outcome))
        else:
            moved.append(m.receipt)
    if moved:
        await service.ack(source, moved)
    if refused:
        await service.nack(source, [receipt for receipt, _ in refused], 0)
    return Moved(len(moved), tuple(outcome for _, outcome in refused))
