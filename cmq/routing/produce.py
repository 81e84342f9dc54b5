"""`ProduceBuilder`: a send's `Produce` command, encoded once on the node that took the send.

The leader proposes these bytes as they are, with its own time stamped over this node's
(`cmq.fsm.commands.restamp_produce`), or merges several sends' parts into one command
(`cmq.routing.coalesce`); nothing else re-encodes a send on its way to the log.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from cmq.errors import Unavailable
from cmq.fsm.commands import NewMessage, Produce, encode_command
from cmq.model import OutgoingMessage, is_fifo_name
from cmq.routing.rpc import ProduceCall
from raftlog.runtime import Clock


class ProduceBuilder:
    """Builds the encoded `Produce` of a send on the node that took it: fresh message ids
    (unique per node: a random prefix, the node id and a counter). Its time is this node's
    ``clock``, replaced by the group leader's when the leader proposes it (`restamp_produce`).

    A message with an absolute deadline (``deliver_at_ms``, ``ttl_deadline_ms``) becomes a delay
    or a time to live counted from this node's time, which the leader's restamp does not
    correct: those are converted only at a reading ``deadline_clock`` vouches for
    (`cmq.node.clockguard.ClockGuard.stamp`: None while this clock is stepped or off from its
    peers), else the send is refused `Unavailable` before anything is proposed (the client
    sends through another node). A clock 29 minutes behind would otherwise make "deliver in
    2 s" a 29-minute delay."""

    __slots__ = ("_clock", "_counter", "_deadline_clock", "_node", "_prefix")

    def __init__(
        self,
        node_id: int,
        clock: Clock,
        deadline_clock: Callable[[], int | None] | None = None,
    ) -> None:
        self._prefix = secrets.token_hex(5)
        self._node = node_id
        self._clock = clock
        self._deadline_clock = deadline_clock or clock.wall_ms
        self._counter = 0

    def next_id(self) -> str:
        self._counter += 1
        return f"{self._prefix}{self._node:02x}{self._counter:012x}"

    def build(self, group: int, name: str, messages: list[OutgoingMessage]) -> ProduceCall:
        """A `ProduceCall` for one attempt of a send (a retried attempt gets fresh ids)."""
        if any(m.deliver_at_ms is not None or m.ttl_deadline_ms is not None for m in messages):
            trusted = self._deadline_clock()
            if trusted is None:
                raise Unavailable(
                    "this node's clock is off (stepped, or away from its peers): it cannot "
                    "convert a deliver_at or a time-to-live deadline; send through another node"
                )
            now = trusted
        else:
            now = self._clock.wall_ms()
        new = tuple(
            NewMessage(
                id=self.next_id(),
                body=m.body,
                binary=m.binary,
                attributes=m.attributes,
                delay_ms=_delay_ms(m, now),
                dedup_id=m.dedup_id,
                group_id=m.group_id,
                ttl_ms=_ttl_ms(m, now),
                priority=m.priority,
            )
            for m in messages
        )
        command = encode_command(Produce(name, now, new))
        # A FIFO queue deduplicates every send (by id or content): a resend is always safe.
        dedup_only = is_fifo_name(name) or all(m.dedup_id is not None for m in messages)
        return ProduceCall(group, command, dedup_only)


def _delay_ms(m: OutgoingMessage, now_ms: int) -> int | None:
    """A message's delay in ms (None: the queue's): a ``deliver_at_ms`` counts from
    ``now_ms`` (the proposing node's clock; in the past: no delay)."""
    if m.deliver_at_ms is not None:
        return max(0, m.deliver_at_ms - now_ms)
    return None if m.delay_seconds is None else m.delay_seconds * 1000


def _ttl_ms(m: OutgoingMessage, now_ms: int) -> int | None:
    """A message's time to live in ms (None: none): a ``ttl_deadline_ms`` counts from
    ``now_ms`` (the proposing node's clock; passed: 1 ms, so it expires at once)."""
    if m.ttl_deadline_ms is not None:
        return max(1, m.ttl_deadline_ms - now_ms)
    return None if m.ttl_seconds is None else m.ttl_seconds * 1000
