"""The queue simulation with scheduled messages and times to live: on top of
`tests.queuesim.sim`'s checks, no message is delivered before its delay has run out
(``deliver_at`` reaches the machine as a delay from the proposing node's clock, so this is the
rule for both), and none after its time to live (counted from its send).

Producers give most messages a delay of 0.3 to 5 s and some a time to live of 1.5 or 4 s (the
simulated cluster's time: clocks agree, so a command's ``now_ms`` is a lower bound of its apply
time and its result's observed time an upper bound). Messages with a time to live may expire
unseen, so they are not among the confirmed ones the drain must deliver.
``python -m tests.queuesim --schedule --seeds N`` runs seeds.
"""

from __future__ import annotations

import asyncio

from cmq.fsm.commands import Command, NewMessage, Produce, Produced
from cmq.model import QueueAttributes
from raftlog.sim.runtime_sim import RuntimeSimConfig
from tests.queuesim.sim import Delivered, QueueSim

DELAYS_MS = (None, 0, 300, 1_500, 5_000)
TTLS_MS = (None, None, None, 1_500, 4_000)


class ScheduleQueueSim(QueueSim):
    """`QueueSim` whose messages are mostly delayed, checking none is delivered early."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.not_before: dict[str, int] = {}
        self.not_after: dict[str, int] = {}

    def attributes(self) -> QueueAttributes:
        return QueueAttributes(archive=True, max_delay_seconds=3600)

    async def producer(self, group: int, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            batch = []
            now = self.now_ms()
            for _ in range(self.rng.randint(1, 4)):
                n += 1
                mid = f"g{group}-{n}"
                self.sent.add(mid)
                delay = self.rng.choice(DELAYS_MS)
                ttl = self.rng.choice(TTLS_MS)
                self.not_before[mid] = now + (delay or 0)
                body = mid.encode() * 8
                batch.append(NewMessage(mid, body, False, (), delay, None, None, ttl))
            res = await self.run(group, Produce(f"q{group}", now, tuple(batch)))
            if isinstance(res, Produced):
                seen = self.now_ms()  # applied, so its deadline is at most seen + ttl
                for m in batch:
                    if m.ttl_ms is None:
                        self.confirmed.add(m.id)
                    else:
                        self.not_after[m.id] = seen + m.ttl_ms
                self.result.acked += len(batch)
            await asyncio.sleep(self.rng.uniform(0.0, 0.02))

    async def run(self, group: int, cmd: Command) -> object | None:
        res = await super().run(group, cmd)
        if isinstance(res, Delivered):
            seen = self.now_ms()  # the lease applied at a queue time no later than this
            for lm in res.messages:
                due = self.not_before.get(lm.id)
                if due is not None and seen < due:
                    self.violation(f"{lm.id} delivered at {seen}, before its delay ran out ({due})")
                gone = self.not_after.get(lm.id)
                if gone is not None and cmd.now_ms >= gone:
                    self.violation(f"{lm.id} delivered at {cmd.now_ms}, after its ttl ({gone})")
        return res
