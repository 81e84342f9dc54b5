"""The queue simulation with message priorities: on top of `tests.queuesim.sim`'s checks
(identical replica images included, so the levels must agree between a replica that replayed
the log and one restored from a snapshot), strict priority order.

The rule: a `Lease` never hands out a message of level L while a message of a level above L
was ready when that command applied (sent, its delay over, not leased or its lease run out,
not acked) and the lease did not take it. Checked where the order is decided, at apply: every
replica's machine carries an observer (`PriorityObserver`) that follows the queue from the
commands and their results alone (levels from the `Produce` messages, readiness from the queue
clock, lease deadlines and ack outcomes), never from the machine's own index. A replica restored
from a snapshot stops observing (it has not seen the commands before it); the others apply
every entry. Producers send levels 0-3 at random, some with a short delay.
``python -m tests.queuesim --priority --seeds N`` runs seeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cmq.fsm.commands import (
    Ack,
    Command,
    CommandFailed,
    EntryOutcomes,
    Lease,
    Leased,
    NewMessage,
    Produce,
    Produced,
    Result,
)
from cmq.fsm.machine import QueueMachine
from cmq.model import QueueAttributes
from raftlog.runtime.statemachine import StateMachine
from raftlog.sim.runtime_sim import RuntimeSimConfig
from tests.queuesim.observed import ObservingMachine
from tests.queuesim.sim import QueueSim

LEVELS = 4
DELAYS_MS = (None, None, 0, 200)


class PriorityObserver:
    """Follows one queue machine's queues from its commands and results (see the module
    docstring); reports a lease out of priority order to ``violation``."""

    def __init__(self, violation: Callable[[str], None]) -> None:
        self.violation = violation
        self.clock: dict[str, int] = {}
        self.level: dict[str, dict[str, int]] = {}  # queue -> id -> level
        self.visible_at: dict[str, dict[str, int]] = {}  # queue -> id -> when it is ready

    def before(self, m: QueueMachine, cmd: Command) -> dict[int, str]:
        """What must be known before ``cmd`` applies: the ids of an ack's seqs."""
        if isinstance(cmd, Ack):
            return {s.seq: s.id for s in m.read(cmd.queue, [seq for seq, _ in cmd.entries])}
        return {}

    def after(self, m: QueueMachine, cmd: Command, res: Result, ids: dict[int, str]) -> None:
        if isinstance(cmd, Produce) and isinstance(res, Produced):
            clock = self._advance(cmd.queue, cmd.now_ms)
            levels = self.level.setdefault(cmd.queue, {})
            visible = self.visible_at.setdefault(cmd.queue, {})
            for msg, (mid, _) in zip(cmd.messages, res.messages, strict=True):
                if mid == msg.id and mid not in levels:  # not a deduplicated repeat
                    levels[mid] = msg.priority
                    visible[mid] = clock + max(0, msg.delay_ms or 0)
        elif isinstance(cmd, Lease) and isinstance(res, Leased):
            self._lease(m, cmd, res)
        elif isinstance(cmd, Ack) and isinstance(res, EntryOutcomes):
            for (seq, _), code in zip(cmd.entries, res.outcomes, strict=True):
                mid = ids.get(seq)
                if code is None and mid is not None:
                    self.level.get(cmd.queue, {}).pop(mid, None)
                    self.visible_at.get(cmd.queue, {}).pop(mid, None)
        elif not isinstance(res, CommandFailed):
            queue, now_ms = getattr(cmd, "queue", None), getattr(cmd, "now_ms", None)
            if isinstance(queue, str) and isinstance(now_ms, int):
                self._advance(queue, now_ms)  # every command with a time moves the clock

    def _advance(self, queue: str, now_ms: int) -> int:
        clock = max(self.clock.get(queue, 0), now_ms)
        self.clock[queue] = clock
        return clock

    def _lease(self, m: QueueMachine, cmd: Lease, res: Leased) -> None:
        clock = self._advance(cmd.queue, cmd.now_ms)
        levels = self.level.get(cmd.queue, {})
        visible = self.visible_at.get(cmd.queue, {})
        leased = [s.id for s in m.read(cmd.queue, [lm.seq for lm in res.messages])]
        taken = set(leased)
        waiting = [
            (levels[mid], mid)
            for mid, at in visible.items()
            if at <= clock and mid not in taken and mid in levels
        ]
        best = max(waiting, default=None)
        for mid in leased:
            level = levels.get(mid)
            if level is not None and best is not None and best[0] > level:
                self.violation(
                    f"{mid} (level {level}) leased at {clock} while {best[1]} (level "
                    f"{best[0]}) was ready"
                )
                break
        visibility = cmd.visibility_ms if cmd.visibility_ms is not None else 30_000
        for mid in leased:
            if mid in visible:
                visible[mid] = clock + max(0, visibility)


class ObservedMachine(ObservingMachine):
    """A `QueueMachine` with a `PriorityObserver` on every command it executes (until it is
    restored from a snapshot)."""

    observer_class = PriorityObserver


class PriorityQueueSim(QueueSim):
    """`QueueSim` over queues with 4 priority levels, checking strict priority order."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.order_violations = 0

    def attributes(self) -> QueueAttributes:
        return QueueAttributes(archive=True, priorities=LEVELS)

    def new_state_machine(self, nid: int, group: int) -> StateMachine:
        return ObservedMachine(self.stores[(nid, group)], self.out_of_order, segment_bytes=2048)

    def out_of_order(self, what: str) -> None:
        self.order_violations += 1
        if self.order_violations <= 20:  # every replica reports the same entry
            self.violation(f"priority order: {what}")

    async def producer(self, group: int, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            batch = []
            for _ in range(self.rng.randint(1, 4)):
                n += 1
                mid = f"g{group}-{n}"
                self.sent.add(mid)
                delay = self.rng.choice(DELAYS_MS)
                level = self.rng.randrange(LEVELS)
                body = mid.encode() * 8
                batch.append(NewMessage(mid, body, False, (), delay, None, None, None, level))
            res = await self.run(group, Produce(f"q{group}", self.now_ms(), tuple(batch)))
            if isinstance(res, Produced):
                self.confirmed.update(m.id for m in batch)
                self.result.acked += len(batch)
            await asyncio.sleep(self.rng.uniform(0.0, 0.02))
