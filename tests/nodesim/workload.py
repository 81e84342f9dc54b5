"""The clients of the whole-node simulator: producers, consumers and the final drain, calling
the `QueueService` methods of random running nodes and recording every call in the run's
`tests.chaos.history.History` (times in virtual seconds).

Each client draws from its own generator (``nodesim/<seed>/producer<i>`` and so on), so a
change in one client's choices leaves the others' as they were.

With ``rewind`` (``--rewind``) a third standard queue, `REWIND_QUEUE`, keeps acknowledged
messages (``retain_acked_seconds``; its creation is a ``create`` op of the history), the
producers and consumers use it like the others, and a rewinder (`Workload.rewinder`) rewinds it
every 1-2 virtual seconds to 0.5-4 s before the true time (a recorded ``rewind`` op: ``since``,
outcome, the count answered), so the chaos checker's rewind rules (`tests.chaos.rewindcheck`)
judge every redelivery after an ack. Its sends record the true time (``Op.wall``, the epoch of
the nodes' clocks plus the loop's time). A message of it is named by its seq, not by its id's
first seq: a rewound copy has the id of the acknowledged message and a new seq (the rules count
its fresh deliveries), and a `Tidy` copy's new seq only splits the per-seq checks.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import TYPE_CHECKING, cast

from cmq.model import OutgoingMessage, QueueAttributes, ReceivedMessage
from tests.chaos.history import Delivery, History, Op, OpKind

if TYPE_CHECKING:
    from tests.nodesim.sim import NodeSim

EPOCH_MS = 1_700_000_000_000
"""The nodes' clocks at virtual time 0 (`tests.nodesim.sim` starts them there)."""

QUEUES = ("q-a", "q-b")
FIFO_QUEUE = "q-f.fifo"
REWIND_QUEUE = "q-w"
RETAIN_ACKED_SECONDS = 600


class Workload:
    """Producers, consumers and the drain of one run (see the module docstring)."""

    def __init__(self, sim: NodeSim, *, fifo: bool, rewind: bool = False) -> None:
        self.sim = sim
        self.history = History()
        self.queues = QUEUES + ((FIFO_QUEUE,) if fifo else ()) + ((REWIND_QUEUE,) if rewind else ())
        self.keys = 0
        self.first_seq: dict[tuple[str, str], int] = {}
        self.unknown = 0
        self.deliveries = 0

    def _rng(self, name: str) -> random.Random:
        return random.Random(f"nodesim/{self.sim.seed}/{name}")

    def _pick(self, rng: random.Random) -> int | None:
        nodes = self.sim.callable_nodes()
        return rng.choice(nodes) if nodes else None

    def _invoke(self, who: str, kind: OpKind, queue: str, node: int) -> Op:
        return self.history.invoke(who, kind, queue, node, self.sim.loop.time())

    def _record(self, op: Op, outcome: str, detail: str) -> None:
        self.history.complete(op, self.sim.loop.time(), outcome, detail)  # type: ignore[arg-type]
        if outcome == "unknown":
            self.unknown += 1

    async def create_queues(self) -> None:
        """Create every queue through random nodes, retrying until each is created."""
        rng = self._rng("create")
        timeout = self.sim.request_timeout
        for name in self.queues:
            retain = RETAIN_ACKED_SECONDS if name == REWIND_QUEUE else 0
            attrs = QueueAttributes(
                fifo=name.endswith(".fifo"), visibility_timeout=2, retain_acked_seconds=retain
            )
            while True:
                nid = self._pick(rng)
                if nid is not None:
                    outcome, _, _ = await self.sim.call(
                        nid,
                        2 * timeout + 3,
                        lambda q, a=attrs, nm=name: q.create_queue(nm, a),
                    )
                    if outcome == "ok":
                        self.sim.note(f"created {name}")
                        if retain:  # what the checker learns the rewound queue from
                            op = self._invoke("setup", "create", name, nid)
                            detail = json.dumps({"retain_acked_seconds": retain})
                            self.history.complete(op, self.sim.loop.time(), "ok", detail)
                        break
                await asyncio.sleep(0.2)

    def _new_key(self, who: str) -> str:
        self.keys += 1
        return f"{who}-{self.keys}"

    async def producer(self, pid: int, stop: asyncio.Event) -> None:
        """Batches of 1-4 new keys (half with dedup ids, a few delayed) to random queues; one
        time in four a burst of 2-5 such sends to one queue through one node at once (what a
        leader merges into one `Produce`: `cmq.routing.coalesce`)."""
        rng = self._rng(f"producer{pid}")
        who = f"p{pid}"
        while not stop.is_set():
            nid = self._pick(rng)
            if nid is None:
                await asyncio.sleep(0.1)
                continue
            name = rng.choice(self.queues)
            burst = rng.randint(2, 5) if rng.random() < 0.25 else 1
            sends = [self._one_send(rng, who, pid, name, nid) for _ in range(burst)]
            await asyncio.gather(*sends)
            await asyncio.sleep(rng.uniform(0.0, 0.1))

    async def _one_send(self, rng: random.Random, who: str, pid: int, name: str, nid: int) -> None:
        fifo = name.endswith(".fifo")
        keys = [self._new_key(who) for _ in range(rng.randint(1, 4))]
        dedup = fifo or rng.random() < 0.5
        msgs = [
            OutgoingMessage(
                body=k.encode(),
                dedup_id=k if dedup else None,
                group_id=f"g{rng.randint(0, 2)}" if fifo else None,
                delay_seconds=None if fifo or rng.random() < 0.9 else rng.randint(0, 1),
            )
            for k in keys
        ]
        op = self._invoke(f"producer{pid}", "send", name, nid)
        op.keys = keys
        if name == REWIND_QUEUE:
            op.wall = self.wall()
        outcome, _, detail = await self.sim.call(
            nid,
            3 * self.sim.request_timeout + 1,
            lambda q, nm=name, ms=msgs: q.send(nm, ms),
        )
        self._record(op, outcome, detail)

    def wall(self) -> float:
        """The true time on the nodes' clocks (epoch seconds; a stepped clock is off it)."""
        return EPOCH_MS / 1000 + self.sim.loop.time()

    async def rewinder(self, stop: asyncio.Event) -> None:
        """Rewind `REWIND_QUEUE` through a random node every 1-2 s to 0.5-4 s before the true
        time, each a recorded ``rewind`` op (see the module docstring)."""
        rng = self._rng("rewinder")
        while True:
            await asyncio.sleep(rng.uniform(1.0, 2.0))
            if stop.is_set():
                return
            back = rng.uniform(0.5, 4.0)
            nid = self._pick(rng)
            if nid is None:
                continue
            op = self._invoke("rewinder", "rewind", REWIND_QUEUE, nid)
            op.wall = self.wall()
            op.since = op.wall - back
            since_ms = round(op.since * 1000)
            outcome, count, detail = await self.sim.call(
                nid,
                3 * self.sim.request_timeout + 1,
                lambda q, ms=since_ms: q.rewind(REWIND_QUEUE, ms),
            )
            if outcome == "ok" and count is not None:
                op.rewound = count
            self._record(op, outcome, detail)

    async def consumer(self, cid: int, stop: asyncio.Event) -> None:
        """Receives (1-3 s visibility, sometimes a 1 s long poll) from random queues."""
        rng = self._rng(f"consumer{cid}")
        while not stop.is_set():
            name = rng.choice(self.queues)
            got = await self.receive_once(
                f"consumer{cid}",
                rng,
                name,
                visibility=rng.choice((1, 2, 3)),
                wait=rng.choice((0, 0, 1)),
                acks=0.8,
            )
            await asyncio.sleep(0.01 if got > 0 else rng.uniform(0.02, 0.2))

    async def receive_once(
        self,
        who: str,
        rng: random.Random,
        name: str,
        *,
        visibility: int,
        wait: int,
        acks: float,
        most: int = 5,
    ) -> int:
        """One receive through a random node, then ack (with chance ``acks``), nack or leave
        each message; how many messages it got (-1: the receive did not succeed)."""
        nid = self._pick(rng)
        if nid is None:
            await asyncio.sleep(0.1)
            return -1
        op = self._invoke(who, "receive", name, nid)
        op.visibility = float(visibility)
        count = rng.randint(1, most)
        outcome, got, detail = await self.sim.call(
            nid,
            2 * self.sim.request_timeout + wait + 1,
            lambda q: q.receive(name, count, visibility, wait),
        )
        self._record(op, outcome, detail)
        if outcome != "ok" or got is None:
            return -1
        msgs = cast("list[ReceivedMessage]", got)
        op.deliveries = [
            Delivery(m.body.decode(), self._number(name, m), m.receipt, m.receive_count)
            for m in msgs
        ]
        self.deliveries += len(msgs)
        to_ack, to_nack = [], []
        for m in msgs:
            x = rng.random()
            if x < acks:
                to_ack.append(m)
            elif x < acks + (1 - acks) / 2:
                to_nack.append(m)
        if to_ack:
            await self._settle(who, rng, name, kind="ack", msgs=to_ack, delay=0)
        if to_nack:
            delay = rng.choice((0, 0, 1))
            await self._settle(who, rng, name, kind="nack", msgs=to_nack, delay=delay)
        return len(msgs)

    def _number(self, name: str, m: ReceivedMessage) -> int:
        """The message's number in the history: the seq it was first delivered under. A
        `cmq.fsm.commands.Tidy` copies a live message forward to a new seq (keeping its id), so
        the history names a stored message by its id's first seq; a key under two numbers is a
        key stored twice (two ids). On `REWIND_QUEUE`, its seq (module docstring)."""
        if name == REWIND_QUEUE:
            return m.seq
        return self.first_seq.setdefault((name, m.id), m.seq)

    async def _settle(
        self,
        who: str,
        rng: random.Random,
        name: str,
        *,
        kind: OpKind,
        msgs: list[ReceivedMessage],
        delay: int,
    ) -> None:
        """Ack or nack ``msgs`` through a random node."""
        nid = self._pick(rng)
        if nid is None:
            return
        receipts = [m.receipt for m in msgs]
        op = self._invoke(who, kind, name, nid)
        op.receipts = receipts
        op.keys = [m.body.decode() for m in msgs]
        op.delay = float(delay)
        bound = 2 * self.sim.request_timeout + 1
        if kind == "ack":
            outcome, res, detail = await self.sim.call(nid, bound, lambda q: q.ack(name, receipts))
        else:
            outcome, res, detail = await self.sim.call(
                nid, bound, lambda q: q.nack(name, receipts, delay)
            )
        if outcome == "ok" and res is not None:
            op.entry_ok = [r.ok for r in res]
        self._record(op, outcome, detail)

    async def drain(self, seconds: float) -> None:
        """Receive and ack every queue (all at once) until its leader shows it empty, for at
        most ``seconds``."""
        deadline = self.sim.loop.time() + seconds
        await asyncio.gather(*(self._drain(name, deadline) for name in self.queues))

    async def _drain(self, name: str, deadline: float) -> None:
        rng = self._rng(f"drain/{name}")
        while self.sim.loop.time() < deadline:
            got = await self.receive_once(
                f"drain-{name}", rng, name, visibility=6, wait=0, acks=1.0, most=10
            )
            if got > 0:
                continue
            if await self._empty(rng, name):
                return
            await asyncio.sleep(0.2)
        self.sim.note(f"{name} not drained in time")

    async def _empty(self, rng: random.Random, name: str) -> bool:
        """Whether the queue's leader shows nothing visible, delayed or in flight."""
        nid = self._pick(rng)
        if nid is None:
            return False
        outcome, got, _ = await self.sim.call(
            nid, 2 * self.sim.request_timeout + 1, lambda q: q.get_queue(name)
        )
        if outcome != "ok" or got is None:
            return False
        _, stats = got
        return stats.visible + stats.delayed + stats.in_flight == 0
