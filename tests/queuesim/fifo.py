"""The queue simulation on FIFO queues (one ``q<group>.fifo`` per data group): producers send
messages in three message groups, each with its own deduplication id, resend a batch whose
outcome they did not learn and sometimes one already confirmed; consumers lease and ack.

Checked on top of `QueueSim`'s checks (nothing lost or invented, no redelivery after an ack,
identical replicas, which now covers the FIFO state in the image):

- per-group order of first deliveries: within a group, first deliveries come in seq order;
- no two messages of a group are leased at once (a lease seen while another message of its
  group holds an unexpired lease the simulation saw is a violation);
- dedup: a resent deduplication id is never enqueued twice (one seq per message id, the
  resend is answered with the original's seq).

``python -m tests.queuesim --fifo --seeds N`` runs it.
"""

from __future__ import annotations

import asyncio

from cmq.fsm.commands import (
    CommandFailed,
    Lease,
    NewMessage,
    Produce,
    Produced,
)
from cmq.model import QueueAttributes
from raftlog.sim.runtime_sim import RuntimeSimConfig, RuntimeSimResult, run_runtime_seed
from tests.queuesim.sim import Delivered, QueueSim

GROUPS = ("a", "b", "c")


def fifo_name(group: int) -> str:
    return f"q{group}.fifo"


class FifoQueueSim(QueueSim):
    """`QueueSim` on FIFO queues (see the module docstring)."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.group_of: dict[str, tuple[int, str]] = {}  # message id -> (data group, group)
        self.seq_of: dict[str, int] = {}  # message id -> its one seq
        self.last_first: dict[tuple[int, str], int] = {}  # (data group, group) -> last seq
        self.maybe_acked: set[str] = set()  # acks whose outcome is unknown (maybe deleted)

    def queue_name(self, group: int) -> str:
        return fifo_name(group)

    def attributes(self) -> QueueAttributes:
        return QueueAttributes(fifo=True)

    async def workload(self, group: int, cid: int, stop: asyncio.Event) -> None:
        await self.ensure_queue(group)
        if cid == 0:
            await self.producer(group, stop)
        else:
            await self.consumer(group, cid, stop)

    async def producer(self, group: int, stop: asyncio.Event) -> None:
        n = 0
        confirmed: list[tuple[NewMessage, ...]] = []
        while not stop.is_set():
            if confirmed and self.rng.random() < 0.1:
                batch = self.rng.choice(confirmed)  # a resend of a confirmed batch
            else:
                new = []
                for _ in range(self.rng.randint(1, 4)):
                    n += 1
                    mid = f"g{group}-{n}"
                    g = self.rng.choice(GROUPS)
                    self.sent.add(mid)
                    self.group_of[mid] = (group, g)
                    new.append(NewMessage(mid, mid.encode() * 8, False, (), None, mid, g))
                batch = tuple(new)
            res = None
            while res is None and not stop.is_set():  # unknown outcome: resend (dedup)
                res = await self.run(group, Produce(fifo_name(group), self.now_ms(), batch))
            if isinstance(res, Produced):
                self.confirm(batch, res)
                confirmed.append(batch)
                self.result.acked += len(batch)
            elif isinstance(res, CommandFailed):
                self.violation(f"FIFO produce refused: {res.code} {res.message}")
            await asyncio.sleep(self.rng.uniform(0.0, 0.02))

    def confirm(self, batch: tuple[NewMessage, ...], res: Produced) -> None:
        for m, (mid, seq) in zip(batch, res.messages, strict=True):
            if mid != m.id:
                self.violation(f"dedup id {m.dedup_id} answered with another message {mid}")
            known = self.seq_of.setdefault(m.id, seq)
            if known != seq:
                self.violation(f"{m.id} enqueued twice (seqs {known} and {seq})")
            self.confirmed.add(m.id)

    async def consume_once(self, group: int, visibility_ms: int, ack_probability: float) -> int:
        now = self.now_ms()
        res = await self.run(group, Lease(fifo_name(group), now, 5, visibility_ms))
        if not isinstance(res, Delivered):
            return 0
        leased_now = {lm.id for lm in res.messages}
        busy = {
            self.group_of[mid]
            for mid, (_, deadline, _count) in self.leases.items()
            if deadline > now
            and mid not in leased_now
            and mid not in self.acked_ids
            and mid not in self.maybe_acked
        }
        for lm in res.messages:
            key = self.group_of.get(lm.id, (group, "?"))
            g = key[1]
            if key in busy:
                self.violation(f"{lm.id} of group {g} leased while another of its group was")
            known = self.seq_of.setdefault(lm.id, lm.seq)
            if known != lm.seq:
                self.violation(f"{lm.id} enqueued twice (seqs {known} and {lm.seq})")
            if lm.id not in self.delivered:
                last = self.last_first.get(key, 0)
                if lm.seq < last:
                    self.violation(
                        f"group {g}: {lm.id} (seq {lm.seq}) first delivered after seq {last}"
                    )
                self.last_first[key] = max(last, lm.seq)
            if lm.id in self.acked_ids:
                self.violation(f"{lm.id} delivered again after its ack was committed")
            self.count_delivery(lm, now, visibility_ms)
        to_ack, out = await self.ack_some(group, res.messages, ack_probability)
        if to_ack and out is None:  # unknown outcome: the ack may be committed, the message deleted
            self.maybe_acked.update(lm.id for lm in to_ack)
        return len(res.messages)


def run_fifo_seed(seed: int, cfg: RuntimeSimConfig | None = None) -> RuntimeSimResult:
    """Run one seed of the FIFO queue simulation on a fresh virtual-time loop."""
    return run_runtime_seed(seed, cfg, FifoQueueSim)
