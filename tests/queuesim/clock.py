"""The queue simulation with one node's clock stepped two hours ahead for a few seconds.

Every command carries the clock of the node that stamped it: a send the clock of a node picked
at random (the node a client called), everything else the clock of the group's leader. One node
(`STEPPED`) runs `STEP_MS` ahead from `STEP_AT` for `STEP_HOLD` virtual seconds, so sends it
stamps meanwhile carry a time two hours ahead (what the product did before its leaders stamped
every send), as do commands it proposes while it leads: the stamps a clock guard exists to keep
out, let in on purpose.

A stamp two hours ahead ends every lease of the queue at once, so leases overlap then: those are
counted (``overlaps``), not violations, as the chaos runner does for clock jumps beyond the
bound. Everything else is checked as in `QueueSim`: nothing confirmed lost, nothing delivered
after its ack, replicas identical.

With ``retime`` (the product's housekeeping rule, `cmq.node.housekeeping.Housekeeper`): the
lifecycle loop at the group's leader proposes a `Retime` when the queue's time stands more than
`RETIME_AFTER_MS` ahead of the leader's clock. Without it, a lease stamped against the queue's
time stands until real time catches up (two hours), and the drain's check reports the confirmed
messages it never got back.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from cmq.fsm.commands import Command, Produce, Retime
from cmq.fsm.machine import QueueMachine
from raftlog.sim.runtime_sim import RuntimeSimConfig
from tests.queuesim.sim import QueueSim

STEPPED = 2
STEP_MS = 2 * 3_600_000
STEP_AT = 3.0
STEP_HOLD = 4.0
RETIME_AFTER_MS = 1_000


class ClockStepSim(QueueSim):
    """`QueueSim` with per-node clocks, one of them stepped (see the module docstring)."""

    retime = True

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.callers = random.Random(seed ^ 0x5EED)  # own draws: the workload's stay as they were
        self.retimes = 0
        self.overlaps = 0

    def violation(self, text: str) -> None:
        if "while lease" in text:
            self.overlaps += 1  # the step's own effect (see the module docstring)
            return
        super().violation(text)

    def clock_of(self, nid: int) -> int:
        t = self.loop.time()
        ahead = STEP_MS if nid == STEPPED and STEP_AT <= t < STEP_AT + STEP_HOLD else 0
        return self.now_ms() + ahead

    async def run(self, group: int, cmd: Command) -> object | None:
        if hasattr(cmd, "now_ms"):
            d = self.leader_of(group)
            leader = STEPPED if d is None else d.raw.raft.id
            stamper = self.callers.choice(self.ids) if isinstance(cmd, Produce) else leader
            cmd = replace(cmd, now_ms=self.clock_of(stamper))  # type: ignore[type-var]
        return await super().run(group, cmd)

    async def archive_some(self, group: int) -> None:
        if self.retime:
            await self.retime_if_ahead(group)
        await super().archive_some(group)

    async def final_checks(self) -> None:
        """The drain, with the leaders' housekeeping still running (as in the product)."""
        done = asyncio.Event()

        async def housekeeping() -> None:
            while not done.is_set():
                if self.retime:
                    for g in self.groups():
                        await self.retime_if_ahead(g)
                await asyncio.sleep(1.0)

        task = asyncio.ensure_future(housekeeping())
        try:
            await super().final_checks()
        finally:
            done.set()
            await task

    async def retime_if_ahead(self, group: int) -> None:
        d = self.leader_of(group)
        if d is None:
            return
        assert isinstance(d.sm, QueueMachine)
        now = self.clock_of(d.raw.raft.id)
        if d.sm.time_ahead(self.queue_name(group), now) > RETIME_AFTER_MS:
            self.retimes += 1
            await self.run(group, Retime(self.queue_name(group), now))


class FrozenClockSim(ClockStepSim):
    """Planted bug: the same step with no `Retime`."""

    retime = False
