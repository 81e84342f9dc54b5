"""`LeaderOps`: the operations run at a group's leader, one per typed call of `cmq.routing.rpc`.

A call arrives here either from this node's router (it leads the group) or forwarded by a peer;
either way it is the same typed object. Each operation builds its command with this node's clock
(ms), proposes it through Raft and turns the applied result into the call's reply; reads (queue
attributes and statistics, stored bodies) are served from the local replica, which is current on
the leader.

Results are typed: a data-group command declares the result it is answered with
(`cmq.fsm.commands.Returns`), and `LeaderOps.command` proposes it and narrows what the runtime
hands back (`MultiRaft.propose` returns ``object``: it hosts the catalog and the queue machines
side by side) in one place, `LeaderOps.propose_as`. A failed command becomes the `CmqError` of
its code (`cmq.errors.error_for`); any other result is a broken invariant.

Receives long-poll: while the queue has no visible message they wait on
`cmq.routing.wakeups.Wakeups`, which the node sets from the machines' apply effects
(`QueueMachine.take_changed`), or until the next invisible message becomes visible.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

from cmq.catalog import META_GROUP
from cmq.catalog.meta import Assignment, CatalogMachine
from cmq.errors import (
    CmqError,
    InvalidParameter,
    InvariantBroken,
    OutcomeUnknown,
    Overloaded,
    QueueNotFound,
    ReceiptInvalid,
    SegmentDamaged,
    Unavailable,
    error_for,
)
from cmq.export_values import MAX_EXPORT_BYTES
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    ClaimSegments,
    Command,
    CommandFailed,
    CreateQueue,
    DeleteQueue,
    Lease,
    Leased,
    MarkArchived,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    Returns,
    Rewind,
    SendParts,
    SetAttributes,
    encode_ack,
    encode_command,
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
    MAX_WAIT_SECONDS,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SentMessage,
    is_fifo_name,
)
from cmq.routing.coalesce import Confirms, SendCoalescer, mergeable
from cmq.routing.receipts import ReceiptSigner
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
from cmq.routing.wakeups import Wakeups
from cmq.segment_values import ArchiveResult, ClaimResult, Refused
from cmq.upgrade.features import BATCH_RECEIPTS
from raftlog.errors import NotLeader, RaftError
from raftlog.errors import Overloaded as RaftOverloaded
from raftlog.runtime import Clock, MultiRaft

log = logging.getLogger("cmq.routing.ops")

R = TypeVar("R")


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


def _refused(refused: tuple[tuple[int, str, str], ...]) -> tuple[Refused, ...]:
    return tuple(Refused(first, reason, batch or None) for first, reason, batch in refused)


def _encoded(cmd: Returns[object]) -> bytes:
    """The proposal bytes of a data-group command (every `Returns` is one of `Command`)."""
    if not isinstance(cmd, Command):
        raise InvariantBroken(f"not a queue command: {cmd!r}")
    return encode_command(cmd)


class LeaderOps:
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
        (`cmq.routing.coalesce`). ``refuse_send`` and ``move_dead_letters``: see the
        attributes of those names (default: never refuse; no mover)."""
        self._segment_bytes = segment_bytes
        self._segment_age_ms = segment_age_ms
        self._raft = raft
        self._catalog = catalog
        self._machines = machines
        self._signer = signer
        self._wakeups = wakeups
        self._clock = clock
        self._timeout = request_timeout
        self.clock_stamp: Callable[[], int | None] = clock_stamp or clock.wall_ms
        """This node's clock for a command, or None while it is not trusted
        (`cmq.node.clockguard.ClockGuard.stamp`)."""
        self.refuse_send: Callable[[int], CmqError | None] = refuse_send or (lambda group: None)
        """Why a send to a group led here must be refused before it is proposed (e.g. its
        data directory is below the disk reserve: `cmq.node.diskwatch.DiskWatch.refuse_send`),
        or None."""
        self._coalescer = SendCoalescer(self._propose_sends) if coalesce_sends else None
        self.move_dead_letters = move_dead_letters
        """Move a queue's messages marked for its dead-letter queue now
        (`cmq.node.housekeeping.Housekeeper.move_dead_letters`). A FIFO receive whose lease
        marked some calls it, so their groups unblock at once."""

    def stamp(self) -> int:
        """This node's clock for a command proposed here; `NotLeader` (route it again) while
        the clock is not trusted, checked on the very reading that stamps (a long poll may
        have begun before a step)."""
        ms = self.clock_stamp()
        if ms is None:
            raise NotLeader(0, "this node's clock is off; it does not lead")
        return ms

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
                return await self._receive(call)
            case AckCall():
                return await self._ack(call)
            case ChangeVisibilityCall():
                return await self._change_visibility(call)
            case NackCall():
                return await self._nack(call)
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

    async def propose(self, group: int, data: bytes) -> object:
        """Propose ``data`` to ``group`` and await its applied result, whatever its machine
        returned; `OutcomeUnknown` when it is not applied within the request deadline,
        `Overloaded` when the group is full."""
        try:
            return await self._raft.propose(group, data, timeout=self._timeout)
        except TimeoutError:
            raise OutcomeUnknown("the change was not applied in time; outcome unknown") from None
        except RaftOverloaded as e:
            raise Overloaded(str(e)) from None

    async def command(self, group: int, cmd: Returns[R]) -> R:
        """Propose the data-group command ``cmd`` to ``group`` and return its result (an
        ``R``: its ``result_type``); a failed command raises its `CmqError`."""
        return await self.propose_as(group, _encoded(cmd), cmd.result_type, type(cmd).__name__)

    async def propose_as(self, group: int, data: bytes, result_type: type[R], what: str) -> R:
        """`propose` ``data`` (a command named ``what``) whose machine answers it with a
        ``result_type``: the one place a result is narrowed. A `CommandFailed` raises the
        `CmqError` of its code; any other result is a broken invariant."""
        res = await self.propose(group, data)
        if isinstance(res, result_type):
            return res
        if isinstance(res, CommandFailed):
            raise error_for(res.code, res.message)
        raise InvariantBroken(f"{what} returned {res!r}, not a {result_type.__name__}")

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

    async def _receive(self, call: ReceiveCall) -> list[ReceivedMessage]:
        name, group = call.name, call.group
        machine = self._machines[group]
        attrs = self._attributes(group, name)
        wait = attrs.receive_wait_seconds if call.wait_seconds is None else call.wait_seconds
        wait = max(0, min(wait, MAX_WAIT_SECONDS))
        visibility = call.visibility_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        # A FIFO receive with an attempt id proposes once even with nothing visible: a retry
        # of that attempt gets its messages again (they are in flight, so not visible).
        replay = call.attempt_id is not None
        while True:
            if replay or machine.has_visible(name, self._clock.wall_ms()):
                replay = False
                lease = Lease(
                    name,
                    self.stamp(),
                    call.max_messages,
                    None if visibility is None else visibility * 1000,
                    call.attempt_id,
                )
                res = await self.command(group, lease)
                moved = (
                    bool(res.dead_letter)
                    and attrs.fifo
                    and await self._move_dead_letters(group, name)
                )
                if res.messages:
                    return self._render_leased(group, machine, name, res)
                if moved:
                    continue  # the groups whose heads moved give their next message now
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            nxt = machine.next_visible_at(name)
            if nxt is not None:
                now = machine.queue_time(name, self._clock.wall_ms())
                remaining = min(remaining, max(0.001, (nxt - now) / 1000))
            await self._wakeups.wait(name, remaining)

    async def _move_dead_letters(self, group: int, name: str) -> bool:
        """`move_dead_letters` of ``name``; whether it ran without failing (a failure leaves
        the messages marked: housekeeping moves them at a later tick)."""
        if self.move_dead_letters is None:
            return False
        try:
            await self.move_dead_letters(group, name)
        except (CmqError, RaftError) as e:
            log.info("dead-letter move of %s at receive deferred: %s", name, e)
            return False
        return True

    def _render_leased(
        self, group: int, machine: QueueMachine, name: str, res: Leased
    ) -> list[ReceivedMessage]:
        seqs = [m.seq for m in res.messages]
        try:
            stored = {m.seq: m for m in machine.read(name, seqs)}
        except SegmentDamaged as e:
            # Never a body from a damaged file: this replica is repaired from the others (its
            # leadership moves first); the leases just taken lapse and the messages come back.
            repairing = self._raft.repair_group(group, str(e))
            raise Unavailable(
                f"queue {name!r}: this node's copy of its data is damaged"
                + ("; it is being repaired from the other replicas, retry" if repairing else "")
            ) from e
        fifo = machine.fifo_ids(name, seqs)
        ttl = machine.ttl_deadlines(name, seqs)
        levels = machine.priorities(name, seqs)
        receipts = self._signer.mint_leased(
            name,
            [(lm.seq, lm.lease_id) for lm in res.messages],
            runs_ok=self._catalog.feature_enabled(BATCH_RECEIPTS),
            group=group,
            incarnation=machine.incarnation(name) or 0,
        )
        out = []
        for lm, receipt in zip(res.messages, receipts, strict=True):
            sm = stored.get(lm.seq)
            if sm is None:
                raise InvariantBroken(f"leased message {name}/{lm.seq} cannot be read")
            out.append(
                ReceivedMessage(
                    id=sm.id,
                    seq=lm.seq,
                    body=sm.body,
                    binary=sm.binary,
                    receipt=receipt,
                    receive_count=lm.receive_count,
                    sent_at_ms=sm.sent_at_ms,
                    attributes=sm.attributes,
                    group_id=fifo[lm.seq][0] if lm.seq in fifo else None,
                    dedup_id=(fifo[lm.seq][1] or None) if lm.seq in fifo else None,
                    ttl_deadline_ms=ttl.get(lm.seq),
                    priority=levels.get(lm.seq, 0),
                )
            )
        return out

    async def _entries(
        self,
        group: int,
        name: str,
        receipts: Iterable[str],
        make: Callable[[list[tuple[int, int, int]]], Ack | ChangeVisibility | Nack],
        encode: Callable[[Ack | ChangeVisibility | Nack], bytes] = _encoded,
    ) -> tuple[str | None, ...]:
        """Verify ``receipts``; propose ``make([(position, seq, lease), ...])`` for the valid
        ones (as ``encode`` lays it out); merge its per-entry outcomes with the receipt errors,
        in request order."""
        codes: list[str | None] = []
        valid: list[tuple[int, int, int]] = []
        incarnation = self._machines[group].incarnation(name) or 0
        verified = self._signer.verify_many(name, receipts, group=group, incarnation=incarnation)
        for i, got in enumerate(verified):
            if isinstance(got, ReceiptInvalid):
                codes.append(got.code)
                continue
            codes.append(None)
            valid.append((i, *got))
        if valid:
            cmd = make(valid)
            res = await self.propose_as(group, encode(cmd), cmd.result_type, type(cmd).__name__)
            outcomes = iter(res.outcomes)
            codes = [next(outcomes) if c is None else c for c in codes]
        return tuple(codes)

    async def _ack(self, call: AckCall) -> tuple[str | None, ...]:
        now, name = self.stamp(), call.name
        return await self._entries(
            call.group,
            name,
            call.receipts,
            lambda v: Ack(name, now, tuple((s, lease) for _, s, lease in v)),
            self._encode_ack,
        )

    def _encode_ack(self, cmd: Ack | ChangeVisibility | Nack) -> bytes:
        """An ack's entries as runs once the flag ``batch_receipts`` is enabled (a node of
        the previous release cannot read them), when that is smaller."""
        if not isinstance(cmd, Ack):
            raise InvariantBroken(f"not an ack: {cmd!r}")
        return encode_ack(cmd, runs_ok=self._catalog.feature_enabled(BATCH_RECEIPTS))

    async def _change_visibility(self, call: ChangeVisibilityCall) -> tuple[str | None, ...]:
        now, name = self.stamp(), call.name
        timeouts = [seconds * 1000 for _, seconds in call.entries]
        return await self._entries(
            call.group,
            name,
            [r for r, _ in call.entries],
            lambda v: ChangeVisibility(
                name, now, tuple((s, lease, timeouts[i]) for i, s, lease in v)
            ),
        )

    async def _nack(self, call: NackCall) -> tuple[str | None, ...]:
        now, name = self.stamp(), call.name
        delay = call.delay_seconds * 1000
        return await self._entries(
            call.group,
            name,
            call.receipts,
            lambda v: Nack(name, now, tuple((s, lease) for _, s, lease in v), delay),
        )
