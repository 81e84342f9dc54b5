"""`SendCoalescer`: at a group's leader, the plain sends to one standard queue that arrive in
the same turn of the event loop are proposed as one `Produce` (`merge_produce`), so the Raft
entry, apply, the segment append and the confirm path run once for all of them. Each send
keeps its own messages, ids and dedup ids, and gets its own slice of the result.

Contract:

- Only sends `produce_parts` can take apart are merged, and only to a standard queue: a FIFO
  queue's checks refuse a whole command, and an import carries the count it expects.
- A merged batch holds at most ``max_messages`` messages and ``max_bytes`` bytes of messages; a
  send that would overflow it starts the next batch (a larger send alone makes a batch).
- Every send of a batch gets the batch's outcome: its slice of the `Produced` in order, or the
  same error (`NotLeader`, `Overloaded`, `OutcomeUnknown`: each means for it what it means for
  the batch). A command refused whole by apply (`CommandFailed`: a check on the committed
  attributes, before anything changed) is proposed again send by send, so one send's refusal
  never becomes another's.
- A caller that stops waiting (cancelled) leaves the batch to the others; the batch's task
  belongs to the coalescer (`close` cancels what is left: its sends fail with
  `OutcomeUnknown` once proposed, `Unavailable` before).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cmq.errors import OutcomeUnknown, Unavailable
from cmq.fsm.commands import SendParts
from cmq.model import is_fifo_name

MAX_MESSAGES = 256
MAX_BYTES = 1 << 20

Confirms = tuple[tuple[str, int], ...]
"""``(id, seq)`` per message, in order (`cmq.fsm.results.Produced.messages`)."""

ProposeParts = Callable[
    [int, str, list[SendParts]], Awaitable[Confirms | list[Confirms | BaseException]]
]
"""Propose the parts' messages as one `Produce` to a group: its confirms, or (a batch refused
whole, proposed again send by send) one outcome per part."""


@dataclass(slots=True)
class _Batch:
    parts: list[SendParts] = field(default_factory=list)
    waiters: list[asyncio.Future[Confirms]] = field(default_factory=list)
    messages: int = 0
    size: int = 0
    proposed: bool = False


def mergeable(parts: SendParts | None) -> bool:
    """Whether a send taken apart as ``parts`` may join a batch (see the module docstring)."""
    return parts is not None and not is_fifo_name(parts.queue)


class SendCoalescer:
    """Batches of sends by (group, queue), each proposed by a task of its own (see the module
    docstring). Not thread-safe: used on the node's event loop."""

    __slots__ = ("_max_bytes", "_max_messages", "_open", "_propose", "_tasks")

    def __init__(
        self,
        propose: ProposeParts,
        *,
        max_messages: int = MAX_MESSAGES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._propose = propose
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._open: dict[tuple[int, str], _Batch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def produce(self, group: int, parts: SendParts) -> Confirms:
        """Send ``parts`` (a `mergeable` send) with the others of this turn to its queue;
        returns its own confirms, in order."""
        key = (group, parts.queue)
        batch = self._open.get(key)
        if batch is None or (
            batch.messages + parts.count > self._max_messages
            or batch.size + len(parts.messages) > self._max_bytes
        ):
            batch = _Batch()
            self._open[key] = batch
            task = asyncio.get_running_loop().create_task(self._run(key, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        fut: asyncio.Future[Confirms] = asyncio.get_running_loop().create_future()
        batch.parts.append(parts)
        batch.waiters.append(fut)
        batch.messages += parts.count
        batch.size += len(parts.messages)
        return await fut

    async def _run(self, key: tuple[int, str], batch: _Batch) -> None:
        try:
            await asyncio.sleep(0)  # the sends of this turn join
            if self._open.get(key) is batch:
                del self._open[key]
            batch.proposed = True
            got = await self._propose(key[0], key[1], batch.parts)
        except asyncio.CancelledError:
            if self._open.get(key) is batch:
                del self._open[key]
            exc: BaseException = (
                OutcomeUnknown("the node stopped while the send was proposed; outcome unknown")
                if batch.proposed
                else Unavailable("the node is stopping; send again")
            )
            _settle(batch.waiters, [exc] * len(batch.waiters))
            raise
        except Exception as e:  # every send of the batch gets its error
            _settle(batch.waiters, [e] * len(batch.waiters))
            return
        if isinstance(got, list):
            _settle(batch.waiters, got)
            return
        outcomes: list[Confirms | BaseException] = []
        at = 0
        for p in batch.parts:
            outcomes.append(got[at : at + p.count])
            at += p.count
        if at != len(got):
            err = OutcomeUnknown(f"a merged send of {at} messages was confirmed {len(got)} times")
            outcomes = [err] * len(batch.parts)
        _settle(batch.waiters, outcomes)

    async def close(self) -> None:
        """Cancel the batches still proposing; their sends fail (see the module docstring)."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _settle(
    waiters: list[asyncio.Future[Confirms]], outcomes: list[Confirms | BaseException]
) -> None:
    for fut, out in zip(waiters, outcomes, strict=True):
        if fut.done():  # its caller stopped waiting
            continue
        if isinstance(out, BaseException):
            fut.set_exception(out)
        else:
            fut.set_result(out)
