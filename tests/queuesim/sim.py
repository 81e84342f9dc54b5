"""Deterministic simulation of the queue: `QueueMachine` replicated by the real raftlog runtime
on a virtual-time loop, under crashes (segment writes not yet flushed are lost too), partitions,
loss, duplication and reordering (see `raftlog.sim.runtime_sim`).

Producers append uniquely named messages; consumers lease and acknowledge them. Checked:

- no confirmed message is lost: after healing, draining every queue delivers each of them;
- nothing is delivered that was never sent;
- no redelivery after a committed ack;
- at most one unexpired lease per message, and none before the retry back-off after an
  expired one ended (`QueueSim.redelivery_at`; `tests.queuesim.retry` runs queues with a
  policy);
- replicas identical: at equal applied index every replica encodes the same state image;
- no proposal hangs (inherited), one leader per term (inherited);
- the segment lifecycle: the queues keep released segments for the archive; producers also
  propose `Tidy` (sealing by age, copying sparse segments' live messages forward: acks then go
  through the old seqs) and archive released segments (claim, read the records from the
  leader's replica, `MarkArchived`); no message is archived twice or without being sent.

``python -m tests.queuesim --seeds N`` runs seeds and prints ``queue seeds=… violations=…``
(``acked`` there counts confirmed messages); ``--fifo`` runs `tests.queuesim.fifo` instead,
``--rewind`` `tests.queuesim.rewind`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import ClassVar

from cmq.errors import CmqError
from cmq.fsm.commands import (
    Ack,
    ClaimSegments,
    Command,
    CommandFailed,
    CreateQueue,
    EntryOutcomes,
    Lease,
    Leased,
    MarkArchived,
    NewMessage,
    Produce,
    Produced,
    SegmentsArchived,
    SegmentsClaimed,
    Tidy,
    encode_command,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import MemorySegmentStore
from cmq.model import QueueAttributes
from raftlog.errors import RaftError
from raftlog.runtime.statemachine import StateMachine
from raftlog.sim.runtime_sim import (
    RuntimeSim,
    RuntimeSimConfig,
    RuntimeSimResult,
    report_seeds,
    run_runtime_seed,
)

EPOCH_MS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class DeliveredMessage:
    """A leased message as a consumer sees it: the lease's result and the stored id."""

    seq: int
    lease_id: int
    receive_count: int
    id: str


@dataclass(frozen=True, slots=True)
class Delivered:
    """What `QueueSim.run` returns for a `Lease` that leased (see `QueueSim.rendered`)."""

    messages: tuple[DeliveredMessage, ...]


class QueueSim(RuntimeSim):
    """One seeded run of the queue on the simulated cluster (one queue per data group)."""

    machine_class: ClassVar[type[QueueMachine]] = QueueMachine
    """What every replica runs (a planted bug's machine in the tests that prove a check)."""
    max_batch: ClassVar[int] = 4
    """The most messages a producer sends in one `Produce`."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        # Odd nodes keep segment indexes (the active segment's too, every 8 records), even ones
        # scan every record on restore: both recovery paths run, and must agree.
        self.stores = {
            (n, g): MemorySegmentStore(indexes=n % 2 == 1, active_index_records=8)
            for n in self.ids
            for g in self.groups()
        }
        self.created: set[int] = set()
        self.confirmed: set[str] = set()
        self.sent: set[str] = set()
        self.delivered: set[str] = set()
        self.acked_ids: set[str] = set()
        # id -> (lease id, deadline ms, receive count) of its last lease seen
        self.leases: dict[str, tuple[int, int, int]] = {}
        self.deliveries = 0
        self.archived: set[str] = set()
        self.archive_batches = 0

    # -- hooks ----------------------------------------------------------------------------------
    def new_state_machine(self, nid: int, group: int) -> StateMachine:
        return self.machine_class(self.stores[(nid, group)], segment_bytes=2048)

    def state_machine_crashed(self, nid: int, group: int) -> None:
        self.stores[(nid, group)].crash()

    def queue_name(self, group: int) -> str:
        """The queue of data group ``group``."""
        return f"q{group}"

    def now_ms(self) -> int:
        return EPOCH_MS + int(self.loop.time() * 1000)

    async def run(self, group: int, cmd: Command) -> object | None:
        """Propose ``cmd`` at the group's leader; None when it failed retriably."""
        d = self.leader_of(group)
        if d is None:
            await asyncio.sleep(0.05)
            return None
        try:
            fut = d.propose(encode_command(cmd))
        except RaftError:
            await asyncio.sleep(0.02)
            return None
        try:
            res = await asyncio.wait_for(asyncio.shield(fut), 30.0)
            if isinstance(res, Leased) and isinstance(cmd, Lease):
                return self.rendered(d.sm, cmd.queue, res)
            return res
        except TimeoutError:
            self.violation(f"{type(cmd).__name__} neither applied nor failed within 30 s")
        except RaftError:
            pass
        return None

    def rendered(self, sm: object, name: str, res: Leased) -> Delivered:
        """What a consumer gets for ``res``, read from the proposing replica as the service
        renders it (`cmq.routing.receive`: a lease's result names seqs; ids come from the store). A
        message no longer live by then (deleted since) is not delivered."""
        assert isinstance(sm, QueueMachine)
        ids = {m.seq: m.id for m in sm.read(name, [lm.seq for lm in res.messages])}
        return Delivered(
            tuple(
                DeliveredMessage(lm.seq, lm.lease_id, lm.receive_count, ids[lm.seq])
                for lm in res.messages
                if lm.seq in ids
            )
        )

    def attributes(self) -> QueueAttributes:
        """The attributes every queue of the run is created with."""
        return QueueAttributes(archive=True)

    def redelivery_allowed(self, group: int, lm: DeliveredMessage, now: int) -> bool:
        """Whether a delivery of an acknowledged message (by a lease at ``now``) is expected
        (`tests.queuesim.rewind`: a rewind made it deliverable again); never here."""
        del group, lm, now
        return False

    def redelivery_at(self, deadline: int, receive_count: int) -> int:
        """The earliest time a message whose lease (its ``receive_count``-th) expired at
        ``deadline`` may be leased again."""
        del receive_count
        return deadline

    async def ensure_queue(self, group: int) -> None:
        while group not in self.created:
            attrs = self.attributes()
            cmd = CreateQueue(self.queue_name(group), attrs, self.now_ms(), 2048, 3_000)
            res = await self.run(group, cmd)
            if res is not None:
                self.created.add(group)

    async def workload(self, group: int, cid: int, stop: asyncio.Event) -> None:
        await self.ensure_queue(group)
        if cid == 0:
            lifecycle = asyncio.ensure_future(self.lifecycle(group, stop))
            try:
                await self.producer(group, stop)
            finally:
                await lifecycle
        else:
            await self.consumer(group, cid, stop)

    def new_message(self, mid: str) -> NewMessage:
        """The message ``mid`` a producer sends (its choices drawn from the run's generator)."""
        delay = self.rng.choice([None, None, None, 0, 300])
        return NewMessage(mid, mid.encode() * 8, False, (), delay, None)

    async def producer(self, group: int, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            batch = []
            for _ in range(self.rng.randint(1, self.max_batch)):
                n += 1
                mid = f"g{group}-{n}"
                self.sent.add(mid)
                batch.append(self.new_message(mid))
            res = await self.run(group, Produce(f"q{group}", self.now_ms(), tuple(batch)))
            if isinstance(res, Produced):
                self.confirmed.update(m.id for m in batch)
                self.result.acked += len(batch)
            await asyncio.sleep(self.rng.uniform(0.0, 0.02))

    async def lifecycle(self, group: int, stop: asyncio.Event) -> None:
        """Next to the producer (its own cadence, no draws from the run's random generator, so
        the workload's other choices stay as they were): `Tidy`, and archive what is released."""
        rounds = 0
        while not stop.is_set():
            rounds += 1
            await self.run(group, Tidy(f"q{group}", self.now_ms()))
            if rounds % 2 == 0:
                await self.archive_some(group)
            await asyncio.sleep(LIFECYCLE_PERIOD)

    async def archive_some(self, group: int) -> None:
        """Claim up to 3 released segments, read their records on the leader's replica, and
        mark them archived (what the archive job does over HTTP)."""
        d = self.leader_of(group)
        if d is None:
            return
        sm = d.sm
        assert isinstance(sm, QueueMachine)
        name = f"q{group}"
        released = [s.first_seq for s in sm.segments(name, "released") or []][:3]
        if not released:
            return
        self.archive_batches += 1
        batch = f"b{group}-{self.archive_batches}"
        claimed = await self.run(
            group, ClaimSegments(name, self.now_ms(), batch, tuple(released), 5_000)
        )
        if not isinstance(claimed, SegmentsClaimed) or not claimed.claimed:
            return
        ids: dict[int, list[str]] = {}
        d = self.leader_of(group)
        if d is None:
            return
        sm = d.sm
        assert isinstance(sm, QueueMachine)
        for first in claimed.claimed:
            try:
                _, records = sm.records(name, first)
                ids[first] = [r.id for batch_ in records for r in batch_]
            except CmqError:  # archived meanwhile (a repeated batch) or gone with a leader change
                return
        done = await self.run(group, MarkArchived(name, self.now_ms(), batch, tuple(ids)))
        if isinstance(done, SegmentsArchived):
            for first in done.archived:
                for mid in ids[first]:
                    if mid in self.archived:
                        self.violation(f"{mid} archived twice")
                    if mid not in self.sent:
                        self.violation(f"{mid} archived but never sent")
                    self.archived.add(mid)

    async def consume_once(self, group: int, visibility_ms: int, ack_probability: float) -> int:
        now = self.now_ms()
        res = await self.run(group, Lease(f"q{group}", now, 5, visibility_ms))
        if not isinstance(res, Delivered):
            return 0
        for lm in res.messages:
            if lm.id in self.acked_ids and not self.redelivery_allowed(group, lm, now):
                self.violation(f"{lm.id} delivered again after its ack was committed")
            prev = self.leases.get(lm.id)
            if prev is not None and prev[1] > now:
                self.violation(f"{lm.id} leased again while lease {prev[0]} was unexpired")
            elif prev is not None and self.redelivery_at(prev[1], prev[2]) > now:
                self.violation(
                    f"{lm.id} leased again at {now} before its back-off after receive "
                    f"{prev[2]} ended ({self.redelivery_at(prev[1], prev[2])})"
                )
            self.count_delivery(lm, now, visibility_ms)
        _, out = await self.ack_some(group, res.messages, ack_probability)
        if isinstance(out, CommandFailed):
            self.violation(f"ack failed: {out.code}")
        return len(res.messages)

    def count_delivery(self, lm: DeliveredMessage, now: int, visibility_ms: int) -> None:
        """Record ``lm``'s lease (taken at ``now`` for ``visibility_ms``) and its delivery; one
        of a message never sent is a violation."""
        self.leases[lm.id] = (lm.lease_id, now + visibility_ms, lm.receive_count)
        if lm.id not in self.sent:
            self.violation(f"{lm.id} delivered but never sent")
        self.delivered.add(lm.id)
        self.deliveries += 1

    async def ack_some(
        self, group: int, messages: tuple[DeliveredMessage, ...], ack_probability: float
    ) -> tuple[list[DeliveredMessage], object | None]:
        """Acknowledge each of ``messages`` with probability ``ack_probability`` (one draw each,
        in order), in one `Ack`; the entries answered as done count as acked. Returns the
        messages proposed and the answer (None: nothing proposed, or the outcome unknown)."""
        to_ack = [lm for lm in messages if self.rng.random() < ack_probability]
        if not to_ack:
            return to_ack, None
        entries = tuple((m.seq, m.lease_id) for m in to_ack)
        out = await self.run(group, Ack(self.queue_name(group), self.now_ms(), entries))
        if isinstance(out, EntryOutcomes):
            for lm, code in zip(to_ack, out.outcomes, strict=True):
                if code is None:
                    self.acked_ids.add(lm.id)
                    self.leases.pop(lm.id, None)
        return to_ack, out

    async def consumer(self, group: int, cid: int, stop: asyncio.Event) -> None:
        del cid
        while not stop.is_set():
            got = await self.consume_once(group, self.rng.choice([300, 2000]), 0.8)
            await asyncio.sleep(0.005 if got else 0.05)

    async def final_checks(self) -> None:
        for g in self.groups():
            await self.ensure_queue(g)
            deadline = self.loop.time() + self.cfg.heal_seconds + DRAIN_SECONDS
            while self.loop.time() < deadline:
                if await self.consume_once(g, DRAIN_VISIBILITY_MS, 1.0):
                    continue
                if self.drained(g):
                    break
                await asyncio.sleep(0.1)
        lost = self.confirmed - self.delivered
        if lost:
            self.violation(f"{len(lost)} confirmed messages never delivered, e.g. {min(lost)}")
        await self.check_replicas()
        self.result.attempted = len(self.sent)

    def drained(self, group: int) -> bool:
        """Whether the group's leader, with everything committed applied, holds no message that
        is visible, delayed or leased (a lease whose receive answer was lost keeps its message
        invisible until it expires: the drain waits for it instead of giving up)."""
        d = self.leader_of(group)
        if d is None or d.raw.raft.log.applied < d.raw.raft.log.committed:
            return False
        sm = d.sm
        assert isinstance(sm, QueueMachine)
        stats = sm.stats(self.queue_name(group), self.now_ms())
        return stats is not None and stats.visible + stats.delayed + stats.in_flight == 0

    async def check_replicas(self) -> None:
        """Once every replica applied the same index, their state images must be identical."""
        for _ in range(400):
            if all(self._applied_equal(g) for g in self.groups()):
                break
            await asyncio.sleep(0.05)
        for g in self.groups():
            if not self._applied_equal(g):
                self.violation(f"group {g}: replicas did not converge")
                continue
            images = {}
            for nid in self.ids:
                sm = self.nodes[nid].drivers[g].sm
                assert isinstance(sm, QueueMachine)
                images[nid] = sm.encode_image(reuse=False)
            if len(set(images.values())) != 1:
                self.violation(f"group {g}: replicas at equal applied index differ")

    def _applied_equal(self, group: int) -> bool:
        applied = {self.nodes[n].drivers[group].raw.raft.log.applied for n in self.ids}
        return len(applied) == 1


LIFECYCLE_PERIOD = 1.0
"""Virtual seconds between two `Tidy` proposals of a group (an archive round every other one)."""
DRAIN_SECONDS = 60
"""How long (virtual seconds, after the heal phase) the final drain may take."""
DRAIN_VISIBILITY_MS = 5_000
"""Visibility of the drain's own leases: one whose ack is lost is released well before the
drain's deadline."""


def run_queue_seed(seed: int, cfg: RuntimeSimConfig | None = None) -> RuntimeSimResult:
    """Run one seed of the queue simulation on a fresh virtual-time loop."""
    return run_runtime_seed(seed, cfg, QueueSim)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.queuesim", description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--fifo", action="store_true", help="FIFO queues (tests.queuesim.fifo)")
    ap.add_argument(
        "--retry", action="store_true", help="queues with a retry back-off (tests.queuesim.retry)"
    )
    ap.add_argument(
        "--schedule",
        action="store_true",
        help="delayed messages, none delivered early (tests.queuesim.schedule)",
    )
    ap.add_argument(
        "--fair",
        action="store_true",
        help="standard queues with tenants, the fairness bound (tests.queuesim.fair)",
    )
    ap.add_argument(
        "--priority",
        action="store_true",
        help="queues with priorities, strict order (tests.queuesim.priority)",
    )
    ap.add_argument(
        "--rewind",
        action="store_true",
        help="queues keeping acked messages, rewound now and then (tests.queuesim.rewind)",
    )
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)
    cfg = RuntimeSimConfig(nodes=args.nodes, seconds=args.seconds)
    seeds = range(args.seed, args.seed + args.seeds)
    if args.fifo:
        from tests.queuesim.fifo import FifoQueueSim

        return report_seeds("fifo", seeds, cfg, FifoQueueSim)
    if args.schedule:
        from tests.queuesim.schedule import ScheduleQueueSim

        return report_seeds("schedule", seeds, cfg, ScheduleQueueSim)
    if args.fair:
        from tests.queuesim.fair import FairQueueSim

        return report_seeds("fair", seeds, cfg, FairQueueSim)
    if args.priority:
        from tests.queuesim.priority import PriorityQueueSim

        return report_seeds("priority", seeds, cfg, PriorityQueueSim)
    if args.rewind:
        from tests.queuesim.rewind import RewindQueueSim

        return report_seeds("rewind", seeds, cfg, RewindQueueSim)
    if args.retry:
        from tests.queuesim.retry import RetryQueueSim

        return report_seeds("retry", seeds, cfg, RetryQueueSim)
    return report_seeds("queue", seeds, cfg, QueueSim)


if __name__ == "__main__":
    raise SystemExit(main())
