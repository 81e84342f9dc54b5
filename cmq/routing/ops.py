"""`LeaderOps`: the operations run at a group's leader, one per typed call of `cmq.routing.rpc`.

A call arrives here either from this node's router (it leads the group) or forwarded by a peer;
either way it is the same typed object. Each operation builds its command with this node's clock
(ms), proposes it through Raft and turns the applied result into the call's reply; reads (queue
attributes and statistics, stored bodies) are served from the local replica, which is current on
the leader. A failed command becomes the `CmqError` of its code (`cmq.errors.error_for`).

Receives long-poll: while the queue has no visible message they wait on `Wakeups`, which the
node sets from the machines' apply effects (`QueueMachine.take_changed`), or until the next
invisible message becomes visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from cmq.catalog.meta import Assignment, CatalogMachine
from cmq.errors import (
    InvalidParameter,
    InvariantBroken,
    OutcomeUnknown,
    Overloaded,
    QueueNotFound,
    ReceiptInvalid,
    error_for,
)
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    ClaimSegments,
    Command,
    CommandFailed,
    Created,
    CreateQueue,
    DeleteQueue,
    EntryOutcomes,
    Lease,
    Leased,
    MarkArchived,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    Purged,
    SegmentsArchived,
    SegmentsClaimed,
    SetAttributes,
    encode_command,
    restamp_produce,
)
from cmq.fsm.machine import QueueMachine
from cmq.model import (
    DEFAULT_SEGMENT_AGE_SECONDS,
    DEFAULT_SEGMENT_BYTES,
    MAX_EXPORT_BYTES,
    MAX_WAIT_SECONDS,
    ArchiveResult,
    ClaimResult,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    Refused,
    SentMessage,
    is_fifo_name,
)
from cmq.routing import clockfault
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
    SetAttributesCall,
)
from raftlog.errors import NotLeader
from raftlog.errors import Overloaded as RaftOverloaded
from raftlog.runtime import MultiRaft

META_GROUP = 0
"""The catalog's group; data groups are numbered from 1."""

R = TypeVar("R")


CLOCK_OFFSET_ENV = "CMQ_CLOCK_OFFSET_MS"
"""Milliseconds added to this node's wall clock (a clock-fault injection hook for the chaos
runner; unset or 0 in production). Read once, when the process starts."""


def _clock_offset_ms(raw: str) -> int:
    try:
        return int(raw or "0")
    except ValueError:
        raise InvalidParameter(f"{CLOCK_OFFSET_ENV} must be an integer; got {raw!r}") from None


_CLOCK_OFFSET_MS = _clock_offset_ms(os.environ.get(CLOCK_OFFSET_ENV, ""))
_FILE_CLOCK = clockfault.from_environment()


def now_ms() -> int:
    """This node's clock, as commands carry it: the wall clock plus `CLOCK_OFFSET_ENV`, plus
    the test-only live offset of `cmq.routing.clockfault` when ``CMQ_CLOCK_FILE`` is set."""
    ms = time.time_ns() // 1_000_000 + _CLOCK_OFFSET_MS
    return ms if _FILE_CLOCK is None else ms + _FILE_CLOCK.offset_ms()


class Wakeups:
    """Long-poll wake-ups: one event per queue someone waits on, set when the queue changed."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def notify(self, queues: Iterable[str]) -> None:
        """Wake the receives waiting on any of ``queues``."""
        events = self._events
        for name in queues:
            event = events.get(name)
            if event is not None:
                event.set()

    async def wait(self, name: str, limit: float) -> None:
        """Sleep until ``name`` changes, or ``limit`` seconds."""
        event = self._events.setdefault(name, asyncio.Event())
        event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), limit)


class WakingMachine:
    """A data group's `QueueMachine` as the raftlog runtime drives it: after each batch of
    applies (or a restore) the runtime calls `after_apply`, which ends the batch
    (`QueueMachine.end_batch`: the segment appends are written out) and hands the machine's
    effects (the queues that changed, `QueueMachine.take_changed`) to the long-poll wake-ups.
    The machine itself never calls out of `apply`."""

    __slots__ = ("machine", "wakeups")

    def __init__(self, machine: QueueMachine, wakeups: Wakeups) -> None:
        self.machine = machine
        self.wakeups = wakeups

    def apply(self, index: int, command: bytes) -> object:
        return self.machine.apply(index, command)

    def snapshot(self) -> bytes:
        return self.machine.snapshot()

    def export_snapshot(self, data: bytes) -> bytes:
        return self.machine.export_snapshot(data)

    def restore(self, index: int, data: bytes) -> None:
        self.machine.restore(index, data)

    def after_apply(self) -> None:
        self.machine.end_batch()
        changed = self.machine.take_changed()
        if changed:
            self.wakeups.notify(changed)


class ProduceBuilder:
    """Builds the encoded `Produce` of a send on the node that took it: fresh message ids
    (unique per node: a random prefix, the node id and a counter). Its time is this node's
    clock, replaced by the group leader's when the leader proposes it (`restamp_produce`)."""

    __slots__ = ("_counter", "_node", "_prefix")

    def __init__(self, node_id: int) -> None:
        self._prefix = secrets.token_hex(5)
        self._node = node_id
        self._counter = 0

    def next_id(self) -> str:
        self._counter += 1
        return f"{self._prefix}{self._node:02x}{self._counter:012x}"

    def build(self, group: int, name: str, messages: list[OutgoingMessage]) -> ProduceCall:
        """A `ProduceCall` for one attempt of a send (a retried attempt gets fresh ids)."""
        new = tuple(
            NewMessage(
                id=self.next_id(),
                body=m.body,
                binary=m.binary,
                attributes=m.attributes,
                delay_ms=None if m.delay_seconds is None else m.delay_seconds * 1000,
                dedup_id=m.dedup_id,
                group_id=m.group_id,
            )
            for m in messages
        )
        command = encode_command(Produce(name, now_ms(), new))
        # A FIFO queue deduplicates every send (by id or content): a resend is always safe.
        dedup_only = is_fifo_name(name) or all(m.dedup_id is not None for m in messages)
        return ProduceCall(group, command, dedup_only)


def _refused(refused: tuple[tuple[int, str, str], ...]) -> tuple[Refused, ...]:
    return tuple(Refused(first, reason, batch or None) for first, reason, batch in refused)


def check(res: object) -> None:
    """Raise the `CmqError` of a failed command."""
    if isinstance(res, CommandFailed):
        raise error_for(res.code, res.message)


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
        request_timeout: float,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segment_age_ms: int = DEFAULT_SEGMENT_AGE_SECONDS * 1000,
    ) -> None:
        """``segment_bytes`` / ``segment_age_ms``: this node's segment limits, recorded with
        each queue it creates (`CreateQueue`)."""
        self._segment_bytes = segment_bytes
        self._segment_age_ms = segment_age_ms
        self._raft = raft
        self._catalog = catalog
        self._machines = machines
        self._signer = signer
        self._wakeups = wakeups
        self._timeout = request_timeout
        self.clock_stamp: Callable[[], int | None] = now_ms
        """This node's clock for a command, or None while it is not trusted
        (`cmq.node.clockguard.ClockGuard.stamp`); set by the node."""

    def stamp(self) -> int:
        """This node's clock for a command proposed here; `NotLeader` (route it again) while
        the clock is not trusted, checked on the very reading that stamps (a long poll may
        have begun before a step)."""
        ms = self.clock_stamp()
        if ms is None:
            raise NotLeader(0, "this node's clock is off; it does not lead")
        return ms

    async def execute(self, call: Call[R]) -> R:
        """Run ``call`` here (this node should lead ``call.group``)."""
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
                check(await self.propose(call.group, encode_command(DeleteQueue(call.name))))
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
                    now_ms=now_ms(),
                )
                if page is None:
                    raise QueueNotFound(f"queue {call.name!r} does not exist")
                return page
            case SetAttributesCall():
                return await self._set_attributes(call)
            case PurgeCall():
                res = await self.propose(call.group, encode_command(Purge(call.name, self.stamp())))
                check(res)
                return res.count if isinstance(res, Purged) else 0
            case AssignQueueCall():
                res = await self.propose(META_GROUP, CatalogMachine.assign(call.name))
                if not isinstance(res, Assignment):
                    raise InvariantBroken(f"catalog returned {res!r}")
                return res.group
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

    async def propose(self, group: int, data: bytes) -> object:
        """Propose ``data`` to ``group`` and await its applied result; `OutcomeUnknown` when
        it is not applied within the request deadline, `Overloaded` when the group is full."""
        try:
            return await self._raft.propose(group, data, timeout=self._timeout)
        except TimeoutError:
            raise OutcomeUnknown("the change was not applied in time; outcome unknown") from None
        except RaftOverloaded as e:
            raise Overloaded(str(e)) from None

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
        res = await self.propose(call.group, encode_command(cmd))
        check(res)
        if not isinstance(res, Created):
            raise InvariantBroken(f"create returned {res!r}")
        return res.created

    def _get(self, call: GetQueueCall) -> tuple[QueueAttributes, QueueStats]:
        attrs = self._attributes(call.group, call.name)
        stats = self._machines[call.group].stats(call.name, now_ms())
        if stats is None:
            raise QueueNotFound(f"queue {call.name!r} does not exist")
        return attrs, stats

    async def _set_attributes(self, call: SetAttributesCall) -> QueueAttributes:
        changes: dict[str, Any] = dict(call.changes)
        current = self._attributes(call.group, call.name)
        merged = current.merged(changes)
        if merged.fifo != current.fifo:
            raise InvalidParameter("fifo is fixed at creation")
        check(await self.propose(call.group, encode_command(SetAttributes(call.name, merged))))
        return merged

    # -- the archive -------------------------------------------------------------------------
    async def _claim(self, call: ClaimSegmentsCall) -> ClaimResult:
        cmd = ClaimSegments(call.name, self.stamp(), call.batch_id, call.segments, call.ttl_ms)
        res = await self.propose(call.group, encode_command(cmd))
        check(res)
        if not isinstance(res, SegmentsClaimed):
            raise InvariantBroken(f"claim returned {res!r}")
        return ClaimResult(res.claimed, _refused(res.refused))

    async def _mark_archived(self, call: MarkArchivedCall) -> ArchiveResult:
        cmd = MarkArchived(call.name, self.stamp(), call.batch_id, call.segments)
        res = await self.propose(call.group, encode_command(cmd))
        check(res)
        if not isinstance(res, SegmentsArchived):
            raise InvariantBroken(f"mark-archived returned {res!r}")
        return ArchiveResult(res.archived, res.already, _refused(res.refused))

    # -- messages ----------------------------------------------------------------------------
    async def _produce(self, call: ProduceCall) -> list[SentMessage]:
        # The leader's clock, not the receiving node's: every time in a queue's state comes
        # from the clock of its group's leader, checked when it is read (`stamp`).
        res = await self.propose(call.group, restamp_produce(call.command, self.stamp()))
        check(res)
        if not isinstance(res, Produced):
            raise InvariantBroken(f"produce returned {res!r}")
        return [SentMessage(i, s) for i, s in res.messages]

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
            if replay or machine.has_visible(name, now_ms()):
                replay = False
                lease = Lease(
                    name,
                    self.stamp(),
                    call.max_messages,
                    None if visibility is None else visibility * 1000,
                    call.attempt_id,
                )
                res = await self.propose(group, encode_command(lease))
                check(res)
                if not isinstance(res, Leased):
                    raise InvariantBroken(f"lease returned {res!r}")
                if res.messages:
                    return self._render_leased(machine, name, res)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            nxt = machine.next_visible_at(name)
            if nxt is not None:
                now = machine.queue_time(name, now_ms())
                remaining = min(remaining, max(0.001, (nxt - now) / 1000))
            await self._wakeups.wait(name, remaining)

    def _render_leased(
        self, machine: QueueMachine, name: str, res: Leased
    ) -> list[ReceivedMessage]:
        seqs = [m.seq for m in res.messages]
        stored = {m.seq: m for m in machine.read(name, seqs)}
        fifo = machine.fifo_ids(name, seqs)
        out = []
        for lm in res.messages:
            sm = stored.get(lm.seq)
            if sm is None:
                raise InvariantBroken(f"leased message {name}/{lm.seq} cannot be read")
            out.append(
                ReceivedMessage(
                    id=sm.id,
                    seq=lm.seq,
                    body=sm.body,
                    binary=sm.binary,
                    receipt=self._signer.mint(name, lm.seq, lm.lease_id),
                    receive_count=lm.receive_count,
                    sent_at_ms=sm.sent_at_ms,
                    attributes=sm.attributes,
                    group_id=fifo[lm.seq][0] if lm.seq in fifo else None,
                    dedup_id=fifo[lm.seq][1] if lm.seq in fifo else None,
                )
            )
        return out

    async def _entries(
        self,
        group: int,
        name: str,
        receipts: Iterable[str],
        make: Callable[[list[tuple[int, int, int]]], Command],
    ) -> tuple[str | None, ...]:
        """Verify ``receipts``; propose ``make([(position, seq, lease), ...])`` for the valid
        ones; merge its per-entry outcomes with the receipt errors, in request order."""
        codes: list[str | None] = []
        valid: list[tuple[int, int, int]] = []
        for i, receipt in enumerate(receipts):
            try:
                seq, lease = self._signer.verify(name, receipt)
            except ReceiptInvalid as e:
                codes.append(e.code)
                continue
            codes.append(None)
            valid.append((i, seq, lease))
        if valid:
            res = await self.propose(group, encode_command(make(valid)))
            check(res)
            if not isinstance(res, EntryOutcomes):
                raise InvariantBroken(f"entries command returned {res!r}")
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
        )

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
