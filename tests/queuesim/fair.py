"""The queue simulation with fair queues: on top of `tests.queuesim.sim`'s checks (identical
replica images included, so the tenants and the fair cursor must agree between a replica that
replayed the log and one restored from a snapshot), the fairness bound.

The rule (`cmq.fsm.tenants`): a `Lease` serves the tenants round-robin, so while another
tenant has a ready message, no tenant gets more than `MAX_IN_A_ROW` (1) picks in a row, counted
over consecutive leases of the queue. A pick counts only when another tenant had a message ready
at it (sent, its delay over, not leased or its lease run out, not acked, not taken earlier in
the same lease); a pick with no other tenant ready resets the count. Checked at apply by an
observer on every replica's machine (`FairObserver`) that follows the queue from the commands and
their results alone (tenants from the `Produce` messages' group ids, readiness from the queue
clock, lease deadlines and ack outcomes); a replica restored from a snapshot stops observing.
Its readiness may lag the machine's (a nack it does not follow), which can only hide a
violation, never invent one. One producer tenant ("a") sends 70% of the messages, "b", "c"
and messages without a group id the rest. ``python -m tests.queuesim --fair --seeds N``.
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
from raftlog.runtime.statemachine import StateMachine
from raftlog.sim.runtime_sim import RuntimeSimConfig
from tests.queuesim.observed import ObservingMachine
from tests.queuesim.sim import QueueSim

MAX_IN_A_ROW = 1
TENANTS = ("a",) * 7 + ("b", "c", None)
DELAYS_MS = (None, None, 0, 200)


class FairObserver:
    """Follows one queue machine's queues from its commands and results (see the module
    docstring); reports a run of picks over the bound to ``violation``."""

    def __init__(self, violation: Callable[[str], None]) -> None:
        self.violation = violation
        self.clock: dict[str, int] = {}
        self.tenant: dict[str, dict[str, str]] = {}  # queue -> id -> tenant ("" for none)
        self.visible_at: dict[str, dict[str, int]] = {}  # queue -> id -> when it is ready
        self.last: dict[str, tuple[str, int]] = {}  # queue -> (last tenant, its counted run)

    def before(self, m: QueueMachine, cmd: Command) -> dict[int, str]:
        """What must be known before ``cmd`` applies: the ids of an ack's seqs."""
        if isinstance(cmd, Ack):
            return {s.seq: s.id for s in m.read(cmd.queue, [seq for seq, _ in cmd.entries])}
        return {}

    def after(self, m: QueueMachine, cmd: Command, res: Result, ids: dict[int, str]) -> None:
        if isinstance(cmd, Produce) and isinstance(res, Produced):
            clock = self._advance(cmd.queue, cmd.now_ms)
            tenants = self.tenant.setdefault(cmd.queue, {})
            visible = self.visible_at.setdefault(cmd.queue, {})
            for msg, (mid, _) in zip(cmd.messages, res.messages, strict=True):
                if mid == msg.id and mid not in tenants:  # not a deduplicated repeat
                    tenants[mid] = msg.group_id or ""
                    visible[mid] = clock + max(0, msg.delay_ms or 0)
        elif isinstance(cmd, Lease) and isinstance(res, Leased):
            self._lease(m, cmd, res)
        elif isinstance(cmd, Ack) and isinstance(res, EntryOutcomes):
            for (seq, _), code in zip(cmd.entries, res.outcomes, strict=True):
                mid = ids.get(seq)
                if code is None and mid is not None:
                    self.tenant.get(cmd.queue, {}).pop(mid, None)
                    self.visible_at.get(cmd.queue, {}).pop(mid, None)
        elif not isinstance(res, CommandFailed):
            queue, now_ms = getattr(cmd, "queue", None), getattr(cmd, "now_ms", None)
            if isinstance(queue, str) and isinstance(now_ms, int):
                self._advance(queue, now_ms)

    def _advance(self, queue: str, now_ms: int) -> int:
        clock = max(self.clock.get(queue, 0), now_ms)
        self.clock[queue] = clock
        return clock

    def _lease(self, m: QueueMachine, cmd: Lease, res: Leased) -> None:
        clock = self._advance(cmd.queue, cmd.now_ms)
        tenants = self.tenant.get(cmd.queue, {})
        visible = self.visible_at.get(cmd.queue, {})
        leased = [s.id for s in m.read(cmd.queue, [lm.seq for lm in res.messages])]
        ready: dict[str, int] = {}  # tenant -> ready messages not yet taken
        for mid, at in visible.items():
            if at <= clock and mid in tenants:
                ready[tenants[mid]] = ready.get(tenants[mid], 0) + 1
        last, run = self.last.get(cmd.queue, ("", 0))
        for mid in leased:
            tenant = tenants.get(mid)
            if tenant is None:
                continue
            others = any(n for t, n in ready.items() if t != tenant)
            run = (run + 1 if tenant == last else 1) if others else 0
            if run > MAX_IN_A_ROW:
                waiting = sorted(t for t, n in ready.items() if n and t != tenant)
                self.violation(
                    f"{mid} leased at {clock}: tenant {tenant!r} got {run} picks in a row while "
                    f"tenants {waiting} had a ready message"
                )
            last = tenant
            if ready.get(tenant):
                ready[tenant] -= 1
        self.last[cmd.queue] = (last, run)
        visibility = cmd.visibility_ms if cmd.visibility_ms is not None else 30_000
        for mid in leased:
            if mid in visible:
                visible[mid] = clock + max(0, visibility)


class FairMachine(ObservingMachine):
    """A `QueueMachine` with a `FairObserver` on every command it executes (until it is
    restored from a snapshot)."""

    observer_class = FairObserver


class FairQueueSim(QueueSim):
    """`QueueSim` over standard queues whose messages name tenants, checking the fairness
    bound."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.fairness_violations = 0

    def new_state_machine(self, nid: int, group: int) -> StateMachine:
        return FairMachine(self.stores[(nid, group)], self.unfair, segment_bytes=2048)

    def unfair(self, what: str) -> None:
        self.fairness_violations += 1
        if self.fairness_violations <= 20:  # every replica reports the same entry
            self.violation(f"fairness: {what}")

    async def producer(self, group: int, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            batch = []
            for _ in range(self.rng.randint(1, 6)):
                n += 1
                mid = f"g{group}-{n}"
                self.sent.add(mid)
                delay = self.rng.choice(DELAYS_MS)
                tenant = self.rng.choice(TENANTS)
                body = mid.encode() * 8
                batch.append(NewMessage(mid, body, False, (), delay, None, tenant))
            res = await self.run(group, Produce(f"q{group}", self.now_ms(), tuple(batch)))
            if isinstance(res, Produced):
                self.confirmed.update(m.id for m in batch)
                self.result.acked += len(batch)
            await asyncio.sleep(self.rng.uniform(0.0, 0.02))
