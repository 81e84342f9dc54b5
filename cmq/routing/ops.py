"""`LeaderOps`: the operations run at a group's leader, one per typed call of `cmq.routing.rpc`.

A call arrives here either from this node's router (it leads the group) or forwarded by a peer;
either way it is the same typed object. Each operation builds its command with this node's clock
(ms), proposes it through Raft and turns the applied result into the call's reply; reads (queue
attributes and statistics, stored bodies) are served from the local replica, which is current on
the leader.

Proposing and narrowing a result is `cmq.routing.proposer.Proposer`'s (`LeaderOps` is one);
the receive long poll is `cmq.routing.receive.Receiver`'s, acks, nacks and visibility changes
`cmq.routing.settle.Settler`'s, and a send's command is built where it was taken
(`cmq.routing.produce.ProduceBuilder`). This module holds the dispatch of every call, the
administration and archive calls, and the sends' proposal (alone or coalesced).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from cmq.catalog import META_GROUP
from cmq.catalog.meta import Assignment, CatalogMachine
from cmq.errors import (
    CmqError,
    InvalidParameter,
    InvariantBroken,
    QueueNotFound,
    error_for,
)
from cmq.export_values import MAX_EXPORT_BYTES
from cmq.fsm.commands import (
    ClaimSegments,
    CommandFailed,
    CreateQueue,
    DeleteQueue,
    MarkArchived,
    Produce,
    Produced,
    Purge,
    Rewind,
    SendParts,
    SetAttributes,
    merge_produce,
    produce_parts,
    restamp_produce,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.rewind import REWIND_MAX
from cmq.logs import log_scope
from cmq.model import (
    DEFAULT_SEGMENT_AGE_SECONDS,
    DEFAULT_SEGMENT_BYTES,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    SentMessage,
)
from cmq.routing.coalesce import Confirms, SendCoalescer, mergeable
from cmq.routing.proposer import Proposer
from cmq.routing.receipts import ReceiptSigner
from cmq.routing.receive import Receiver
from cmq.routing.rpc import (
    AckCall,
    AnyCall,
    AssignQueueCall,
    Call,
    CatalogCall,
    ChangeVisibilityCall,
    ClaimSegmentsCall,
    CreateQueueCall,
    DeleteQueueCall,
    ExportCall,
    GetQueueCall,
    MarkArchivedCall,
    NackCall,
    PeekCall,
    ProduceCall,
    PurgeCall,
    QueueMetaCall,
    ReceiveCall,
    RegisterNodeCall,
    ReleaseCall,
    RemoveQueueCall,
    RewindCall,
    SetAttributesCall,
)
from cmq.routing.settle import Settler
from cmq.routing.wakeups import Wakeups
from cmq.segment_values import ArchiveResult, ClaimResult, Refused
from raftlog.runtime import Clock, MultiRaft

R = TypeVar("R")


def _refused(refused: tuple[tuple[int, str, str], ...]) -> tuple[Refused, ...]:
    return tuple(Refused(first, reason, batch or None) for first, reason, batch in refused)


class LeaderOps(Proposer):
    """Runs typed calls at the leader of their group (see the module docstring)."""

    def __init__(
        self,
        *,
        raft: MultiRaft,
        catalog: CatalogMachine,
        machines: dict[int, QueueMachine],
        signer: ReceiptSigner,
        wakeups: Wakeups,
        clock: Clock,
        request_timeout: float,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segment_age_ms: int = DEFAULT_SEGMENT_AGE_SECONDS * 1000,
        coalesce_sends: bool = True,
        clock_stamp: Callable[[], int | None] | None = None,
        refuse_send: Callable[[int], CmqError | None] | None = None,
        move_dead_letters: Callable[[int, str], Awaitable[None]] | None = None,
    ) -> None:
        """``clock``: this node's (`cmq.routing.clock.NodeClock`), read for the queues' time
        of reads here; commands are stamped through ``clock_stamp`` (default: ``clock``'s
        wall time). ``segment_bytes`` / ``segment_age_ms``: this node's segment limits,
        recorded with each queue it creates (`CreateQueue`). ``coalesce_sends``: the sends to
        one standard queue that arrive in one turn of the loop are proposed as one `Produce`
        (`cmq.routing.coalesce`). ``refuse_send``: see that attribute (default: never refuse).
        ``move_dead_letters``: move a queue's messages marked for its dead-letter queue now
        (`cmq.node.housekeeping.Housekeeper.move_dead_letters`; default: no mover); a FIFO
        receive whose lease marked some calls it, so their groups unblock at once."""
        super().__init__(raft, request_timeout, clock_stamp or clock.wall_ms)
        self._segment_bytes = segment_bytes
        self._segment_age_ms = segment_age_ms
        self._catalog = catalog
        self._machines = machines
        self._clock = clock
        self.refuse_send: Callable[[int], CmqError | None] = refuse_send or (lambda group: None)
        """Why a send to a group led here must be refused before it is proposed (e.g. its
        data directory is below the disk reserve: `cmq.node.diskwatch.DiskWatch.refuse_send`),
        or None."""
        self._coalescer = SendCoalescer(self._propose_sends) if coalesce_sends else None
        self._receiver = Receiver(
            proposer=self,
            raft=raft,
            catalog=catalog,
            machines=machines,
            signer=signer,
            wakeups=wakeups,
            clock=clock,
            attributes=self._attributes,
            move_dead_letters=move_dead_letters,
        )
        self._settler = Settler(proposer=self, catalog=catalog, machines=machines, signer=signer)

    async def execute(self, call: Call[R]) -> R:
        """Run ``call`` here (this node should lead ``call.group``); what is logged meanwhile
        names its group and queue (`cmq.logs.LOG_SCOPE`)."""
        with log_scope(call.group, getattr(call, "name", None)):
            return cast(R, await self._dispatch(cast(AnyCall, call)))

    async def _dispatch(self, call: AnyCall) -> object:
        match call:
            case ProduceCall():
                return await self._produce(call)
            case ReceiveCall():
                return await self._receiver.receive(call)
            case AckCall():
                return await self._settler.ack(call)
            case ChangeVisibilityCall():
                return await self._settler.change_visibility(call)
            case NackCall():
                return await self._settler.nack(call)
            case CreateQueueCall():
                return await self._create(call)
            case DeleteQueueCall():
                await self.command(call.group, DeleteQueue(call.name))
                return None
            case GetQueueCall():
                return self._get(call)
            case PeekCall():
                self._attributes(call.group, call.name)  # QueueNotFound
                return [
                    PeekedMessage(m.id, m.seq, m.body, m.binary, m.sent_at_ms, m.attributes)
                    for m in self._machines[call.group].peek(call.name, call.limit)
                ]
            case ExportCall():
                self._attributes(call.group, call.name)  # QueueNotFound
                page = self._machines[call.group].export_page(
                    call.name,
                    after=call.after,
                    upto=call.upto,
                    limit=call.limit,
                    max_bytes=MAX_EXPORT_BYTES,
                    now_ms=self._clock.wall_ms(),
                )
                if page is None:
                    raise QueueNotFound(f"queue {call.name!r} does not exist")
                return page
            case SetAttributesCall():
                return await self._set_attributes(call)
            case PurgeCall():
                return (await self.command(call.group, Purge(call.name, self.stamp()))).count
            case RewindCall():
                return await self._rewind(call)
            case AssignQueueCall():
                command = CatalogMachine.assign(call.name)
                return (await self.propose_as(META_GROUP, command, Assignment, "assign")).group
            case RemoveQueueCall():
                await self.propose(META_GROUP, CatalogMachine.remove(call.name))
                return None
            case ClaimSegmentsCall():
                return await self._claim(call)
            case MarkArchivedCall():
                return await self._mark_archived(call)
            case RegisterNodeCall():
                cmd = CatalogMachine.register_node(call.node, call.address, list(call.data_dirs))
                await self.propose(META_GROUP, cmd)
                return None
            case QueueMetaCall():
                if not call.changes and not call.unset:
                    return self._catalog.meta_of(call.name)
                cmd = CatalogMachine.update_meta(call.name, dict(call.changes), list(call.unset))
                return await self.propose(META_GROUP, cmd)
            case CatalogCall():
                raise InvariantBroken("catalog calls are run by cmq.routing.router.Router")
            case ReleaseCall():
                raise InvariantBroken("release calls are answered by cmq.routing.router.Router")

    async def _rewind(self, call: RewindCall) -> int:
        """Propose the rewind in parts of at most `REWIND_MAX` messages, each stamped anew,
        until the machine says it is complete; how many messages came back."""
        total, start = 0, 0
        while True:
            cmd = Rewind(call.name, self.stamp(), call.since_ms, start, REWIND_MAX)
            done = await self.command(call.group, cmd)
            total += done.count
            if not done.next_seq:
                return total
            start = done.next_seq

    def _attributes(self, group: int, name: str) -> QueueAttributes:
        attrs = self._machines[group].attributes(name)
        if attrs is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        return attrs

    # -- administration ----------------------------------------------------------------------
    async def _create(self, call: CreateQueueCall) -> bool:
        cmd = CreateQueue(
            call.name, call.attributes, self.stamp(), self._segment_bytes, self._segment_age_ms
        )
        return (await self.command(call.group, cmd)).created

    def _get(self, call: GetQueueCall) -> tuple[QueueAttributes, QueueStats]:
        attrs = self._attributes(call.group, call.name)
        stats = self._machines[call.group].stats(call.name, self._clock.wall_ms())
        if stats is None:
            raise QueueNotFound(f"queue {call.name!r} does not exist")
        return attrs, stats

    async def _set_attributes(self, call: SetAttributesCall) -> QueueAttributes:
        changes: dict[str, Any] = dict(call.changes)
        current = self._attributes(call.group, call.name)
        merged = current.merged(changes)
        if merged.fifo != current.fifo:
            raise InvalidParameter("fifo is fixed at creation")
        await self.command(call.group, SetAttributes(call.name, merged))
        return merged

    # -- the archive -------------------------------------------------------------------------
    async def _claim(self, call: ClaimSegmentsCall) -> ClaimResult:
        cmd = ClaimSegments(call.name, self.stamp(), call.batch_id, call.segments, call.ttl_ms)
        res = await self.command(call.group, cmd)
        return ClaimResult(res.claimed, _refused(res.refused))

    async def _mark_archived(self, call: MarkArchivedCall) -> ArchiveResult:
        cmd = MarkArchived(call.name, self.stamp(), call.batch_id, call.segments)
        res = await self.command(call.group, cmd)
        return ArchiveResult(res.archived, res.already, _refused(res.refused))

    # -- messages ----------------------------------------------------------------------------
    async def _produce(self, call: ProduceCall) -> list[SentMessage]:
        # The leader's clock, not the receiving node's: every time in a queue's state comes
        # from the clock of its group's leader, checked when it is read (`stamp`).
        refused = self.refuse_send(call.group)
        if refused is not None:
            raise refused
        if self._coalescer is not None:
            parts = produce_parts(call.command)
            if parts is not None and mergeable(parts):
                got = await self._coalescer.produce(call.group, parts)
                return [SentMessage(i, s) for i, s in got]
        data = restamp_produce(call.command, self.stamp())
        res = await self.propose_as(call.group, data, Produce.result_type, "Produce")
        return [SentMessage(i, s) for i, s in res.messages]

    async def _propose_sends(
        self, group: int, queue: str, parts: list[SendParts]
    ) -> Confirms | list[Confirms | BaseException]:
        """The `SendCoalescer`'s proposal: ``parts`` as one `Produce` stamped here; refused
        whole by apply (nothing changed), each part again on its own, one outcome each."""
        res = await self.propose(group, merge_produce(queue, self.stamp(), parts))
        if isinstance(res, Produced):
            return res.messages
        if not isinstance(res, CommandFailed):
            raise InvariantBroken(f"Produce returned {res!r}, not a Produced")
        if len(parts) == 1:
            raise error_for(res.code, res.message)
        alone = await asyncio.gather(
            *(self._propose_sends(group, queue, [p]) for p in parts), return_exceptions=True
        )
        return [cast("Confirms | BaseException", a) for a in alone]

    async def close(self) -> None:
        """Stop what this leader runs on its own (the send batches still proposing)."""
        if self._coalescer is not None:
            await self._coalescer.close()
