"""`Housekeeper`: the timed work of the groups this node leads, proposed from what the pure
queue machine says is due.

Every `NodeConfig.housekeeping_interval` seconds (Ra's ``tick``) the housekeeper asks each data
group it leads (registration in the catalog is `cmq.node.membership`'s) what is due per
queue (`QueueMachine.due`: retention expiry, messages marked for the dead-letter queue) and
proposes it: an `Expire` carrying this node's clock, a `Tidy` (seal an old active segment, copy
the few live messages of sparse sealed segments forward; `cmq.fsm.lifecycle`), and an
at-least-once dead-letter move (`cmq.redrive`: a deduplicated per-entry send of copies to the
dead-letter queue, then a `DeadLetter` deleting here the messages whose copy is stored; one the
dead-letter queue refuses, too large for it say, stays marked and is logged).
While segment files await removal (released or archived segments: they go at the snapshot after
the one that records their release), it asks every replica's group for a snapshot each tick,
and the leader proposes one `Tidy` so that idle groups apply an entry to snapshot after.
A failure defers that queue's work to the next tick; the machine still says it is due then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

from cmq.catalog.meta import CatalogMachine
from cmq.errors import CmqError
from cmq.fsm.commands import DeadLetter, Expire, Retime, Retimed, Tidy, encode_command
from cmq.fsm.machine import Due, QueueMachine
from cmq.model import SendRefused
from cmq.redrive import Moving, Sender, copy
from cmq.routing.ops import LeaderOps
from cmq.routing.router import Router
from cmq.upgrade.features import QUEUE_RETIME
from raftlog.errors import RaftError
from raftlog.runtime import MultiRaft
from raftlog.transport import Address

log = logging.getLogger("cmq.node.housekeeping")

DEAD_LETTER_BATCH = 100
"""At most this many messages are moved to a dead-letter queue per queue and tick."""


class Housekeeper:
    """Proposes the due work of the groups led here (see the module docstring)."""

    def __init__(
        self,
        *,
        node_id: int,
        peer: Address,
        data_dirs: tuple[str, ...],
        raft: MultiRaft,
        catalog: CatalogMachine,
        machines: dict[int, QueueMachine],
        router: Router,
        ops: LeaderOps,
        send: Sender,
        interval: float,
        clock_bound_ms: float = 500.0,
        clock_confirmed: Callable[[], bool] = lambda: True,
    ) -> None:
        """``send``: this node's `QueueService.send_each` (dead-letter copies take the same path and
        send slots as any other send). ``clock_bound_ms`` / ``clock_confirmed``: the skew
        bound and whether this node's clock is confirmed by its peers now
        (`cmq.node.clockguard`), for `Retime`."""
        self._id = node_id
        self._address = f"{peer.host}:{peer.port}"
        self._data_dirs = [os.path.abspath(d) for d in data_dirs]
        self._raft = raft
        self._catalog = catalog
        self._machines = machines
        self._router = router
        self._ops = ops
        self._send = send
        self._interval = interval
        self._clock_bound_ms = clock_bound_ms
        self._clock_confirmed = clock_confirmed
        self.retimed = 0
        """Queues retimed by this node (`Retime`)."""
        self._told_retime: set[str] = set()
        self._told_refused: set[tuple[str, str]] = set()
        """(queue, message id) of dead-letter copies refused and logged (once each)."""

    async def run(self) -> None:
        """Tick until cancelled."""
        while True:
            await asyncio.sleep(self._interval)
            await self.tick()

    async def tick(self) -> None:
        """One round: propose what is due in each group led here (registration in the catalog
        is `cmq.node.membership`'s)."""
        if not self._router.clock_ok():
            return  # this node's clock is off: it stamps nothing (cmq.node.clockguard)
        for group, machine in list(self._machines.items()):
            if group not in self._raft.groups:
                continue  # dropped meanwhile
            pending = machine.files_pending()
            if pending:
                # Released / archived segments' files go at the snapshot after the one that
                # records their release: snapshot now rather than after 20,000 entries.
                self._raft.group(group).request_snapshot()
            if self._raft.leader_of(group) != self._id:
                continue
            names = machine.queue_names()
            if pending and names:
                # The second snapshot needs one more applied entry on every replica, also on
                # an idle group: a Tidy (harmless, decided in apply) is one.
                with contextlib.suppress(CmqError, RaftError):
                    await self._ops.propose(
                        group, encode_command(Tidy(names[0], self._ops.stamp()))
                    )
            for name in names:
                try:
                    # A fresh trusted reading per queue: a round's earlier proposals take time,
                    # and a stale one would make a queue look ahead of this clock.
                    now = self._ops.stamp()
                    await self._retime_if_ahead(group, machine, name, now)
                    due = machine.due(name, now, DEAD_LETTER_BATCH)
                    if due is not None:
                        await self._propose_due(group, machine, due)
                except (CmqError, RaftError) as e:
                    log.info("housekeeping of %s deferred: %s", name, e)

    async def _retime_if_ahead(
        self, group: int, machine: QueueMachine, name: str, now: int
    ) -> None:
        """A queue whose time stands ahead of this leader's confirmed clock by more than two
        bounds (two clocks each within the bound of the cluster's median) got a stamp from a
        clock far ahead: `Retime` it, so its deadlines come due at the leaders' pace instead
        of when real time catches up."""
        ahead = machine.time_ahead(name, now)
        if ahead <= 2 * self._clock_bound_ms or not self._clock_confirmed():
            return
        if not self._catalog.feature_enabled(QUEUE_RETIME):
            if name not in self._told_retime:
                self._told_retime.add(name)
                log.error(
                    "queue %s: its time stands %+d ms ahead of this leader's clock, and the "
                    "feature flag %s that would let it resume is not enabled: enable it "
                    "(cmq cluster enable-feature %s) once every node runs a release that has it",
                    name,
                    ahead,
                    QUEUE_RETIME,
                    QUEUE_RETIME,
                    extra={"event": "queue_time_ahead_blocked", "group": group, "queue": name},
                )
            return
        res = await self._ops.propose(group, encode_command(Retime(name, now)))
        if isinstance(res, Retimed) and res.ahead_ms:
            self.retimed += 1
            log.warning(
                "queue %s: its time stood %+d ms ahead of this leader's clock (a stamp from a "
                "clock far ahead got in); it runs on from there and slews back",
                name,
                res.ahead_ms,
                extra={"event": "queue_time_ahead", "group": group, "queue": name},
            )

    async def _propose_due(self, group: int, machine: QueueMachine, due: Due) -> None:
        if due.expire:
            await self._ops.propose(group, encode_command(Expire(due.queue, due.now_ms)))
        if due.tidy:
            await self._ops.propose(group, encode_command(Tidy(due.queue, due.now_ms)))
        await self._move_dead_letters(group, machine, due)

    async def move_dead_letters(self, group: int, name: str) -> None:
        """Move now the messages of ``name`` (in ``group``, led here) marked for its
        dead-letter queue, as a tick would: a FIFO receive that marks a group's head calls it,
        so that the group's next message is deliverable at once (as in SQS) rather than after
        the next tick. Safe beside a tick doing the same (the copies are deduplicated, and a
        `DeadLetter` deletes only what is still here)."""
        machine = self._machines.get(group)
        if machine is None or self._raft.leader_of(group) != self._id:
            return
        due = machine.due(name, self._ops.stamp(), DEAD_LETTER_BATCH)
        if due is not None:
            await self._move_dead_letters(group, machine, due)

    async def _move_dead_letters(self, group: int, machine: QueueMachine, due: Due) -> None:
        if not due.dead_letters:
            return
        # At-least-once move: copy into the dead-letter queue, then delete here.
        stored = machine.read(due.queue, due.dead_letters)
        if not stored:
            return
        seqs = [m.seq for m in stored]
        fifo = machine.fifo_ids(due.queue, seqs)  # FIFO: keep the group
        ttl = machine.ttl_deadlines(due.queue, seqs)  # the copy expires when this would
        levels = machine.priorities(due.queue, seqs)  # and the priority
        moving = [
            Moving(
                m.id,
                m.body,
                m.binary,
                m.attributes,
                fifo[m.seq][0] if m.seq in fifo else None,
                ttl.get(m.seq),
                levels.get(m.seq, 0),
            )
            for m in stored
        ]
        outcomes = await copy(self._send, due.dead_letter_queue, moving, f"dlq:{due.queue}")
        copied = []
        for m, outcome in zip(stored, outcomes, strict=True):
            if isinstance(outcome, SendRefused):
                self._tell_refused(due, m.id, outcome)
            else:
                copied.append(m.seq)
        if copied:
            await self._ops.propose(group, encode_command(DeadLetter(due.queue, tuple(copied))))

    def _tell_refused(self, due: Due, message_id: str, refused: SendRefused) -> None:
        """Log (once per message) a dead-letter copy the dead-letter queue refused: the
        message stays in its queue, marked, and is tried again every tick."""
        if (due.queue, message_id) in self._told_refused:
            return
        if len(self._told_refused) >= 10_000:
            self._told_refused.clear()
        self._told_refused.add((due.queue, message_id))
        log.warning(
            "queue %s: message %s stays, its dead-letter queue %s refuses it: %s: %s",
            due.queue,
            message_id,
            due.dead_letter_queue,
            refused.code,
            refused.message,
            extra={"event": "dead_letter_refused", "queue": due.queue},
        )
