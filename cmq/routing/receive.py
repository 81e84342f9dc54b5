"""`Receiver`: a receive at the queue's leader, the long poll and the deliveries it renders.

While the queue has no visible message a receive waits on `cmq.routing.wakeups.Wakeups`,
which the node sets from the machines' apply effects (`QueueMachine.take_changed`), or until
the next invisible message becomes visible, then proposes one `Lease` and renders what it
leased: each message read from this replica's segments (never a body from a damaged file:
the group is repaired from the others and the receive answered `Unavailable`), with a signed
receipt per lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from cmq.catalog.meta import CatalogMachine
from cmq.errors import CmqError, InvariantBroken, SegmentDamaged, Unavailable
from cmq.fsm.commands import Lease, Leased
from cmq.fsm.machine import QueueMachine
from cmq.model import MAX_WAIT_SECONDS, QueueAttributes, ReceivedMessage
from cmq.routing.proposer import Proposer
from cmq.routing.receipts import ReceiptSigner
from cmq.routing.rpc import ReceiveCall
from cmq.routing.wakeups import Wakeups
from cmq.upgrade.features import BATCH_RECEIPTS
from raftlog.errors import RaftError
from raftlog.runtime import Clock, MultiRaft

log = logging.getLogger("cmq.routing.receive")


class Receiver:
    """Runs `ReceiveCall`s at the leader through ``proposer`` (module docstring)."""

    def __init__(
        self,
        *,
        proposer: Proposer,
        raft: MultiRaft,
        catalog: CatalogMachine,
        machines: dict[int, QueueMachine],
        signer: ReceiptSigner,
        wakeups: Wakeups,
        clock: Clock,
        attributes: Callable[[int, str], QueueAttributes],
        move_dead_letters: Callable[[int, str], Awaitable[None]] | None,
    ) -> None:
        """``attributes``: a queue's attributes (`QueueNotFound` when it is gone);
        ``move_dead_letters``: move the marked dead letters of a queue now (None: no mover)."""
        self._proposer = proposer
        self._raft = raft
        self._catalog = catalog
        self._machines = machines
        self._signer = signer
        self._wakeups = wakeups
        self._clock = clock
        self._attributes = attributes
        self._mover = move_dead_letters

    async def receive(self, call: ReceiveCall) -> list[ReceivedMessage]:
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
                    self._proposer.stamp(),
                    call.max_messages,
                    None if visibility is None else visibility * 1000,
                    call.attempt_id,
                )
                res = await self._proposer.command(group, lease)
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
        """The dead-letter mover on ``name``; whether it ran without failing (a failure leaves
        the messages marked: housekeeping moves them at a later tick)."""
        if self._mover is None:
            return False
        try:
            await self._mover(group, name)
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
