"""Clients of a chaos run: producers and consumers on `cmq.client` (one attempt per call: the
workload decides what to retry), every operation recorded in a `History`.

Producers send batches of unique messages (body = dedup id = key) to a random node and, when
the outcome is unknown, sometimes resend the same batch (the dedup window must make that
idempotent). Consumers receive with a short visibility timeout and then ack, nack or ignore each
message (an ignored lease expires and the message is delivered again). Clients talk to any node:
a killed node refuses the connection (a definite failure), a paused or cut-off one times out.

Choices are fixed by the seed, one stream per decision rather than one per client (outcomes and
timing decide how many decisions a client makes, so a shared stream would shift every later
choice after the first different outcome): the n-th batch of a producer (queue, size, body
sizes, node of each attempt, whether to resend), the n-th receive of a consumer (queue, node,
visibility, long poll, how many) and the fate of a message at each receive count (ack, nack or
let expire) each draw from `Workload.choices`, keyed by what they decide. A replay with the
same seed makes the same choices for every operation both runs reach.

Bodies: the key, then ``~`` and a padding whose length the seed fixes per key (0 to
``body_max`` bytes); a delivered body that is not exactly that is recorded under the whole
body, so the checker reports it as unexpected (a corrupted body cannot pass for its key).

The clients above are the ``native`` surface. `WorkloadConfig.surfaces` adds the others
(`tests.chaos.surfaces`: FIFO groups, delayed sends, a queue with a dead-letter queue and the
redrive back, a queue that keeps acknowledged messages and is rewound,
`tests.chaos.streamclients`, `tests.chaos.sqsclients`), each on its own queue and
with choices keyed by its own process names, so the native clients choose the same with or
without them. `start` creates their queues (recorded as ``create`` ops); `queues` lists every
queue for the drain, and `quiet` tells the drain when the last receives were empty and the
redrive is over.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cmq.client import NO_RETRY, Client, ConnectFailed, Message, ServerError
from cmq.errors import CmqError
from tests.chaos.history import Delivery, History, Op, OpKind, Outcome
from tests.chaos.surfaces import (
    DELAY_QUEUE,
    DLQ_SOURCE,
    FIFO_QUEUE,
    REWIND_QUEUE,
    DeadLetters,
    create_surface_queues,
    is_poison,
    produce,
    rewinder,
    surface_queues,
)

T = TypeVar("T")


@dataclass(frozen=True)
class WorkloadConfig:
    queues: tuple[str, ...] = ("chaos-a", "chaos-b")
    producers: int = 2
    consumers: int = 2
    batch_max: int = 5
    receive_max: int = 5
    visibilities: tuple[int, ...] = (1, 2, 3)
    """Receive visibility timeouts (s) during the faults: short, so leases expire often."""
    request_timeout: float = 5.0
    produce_gap: tuple[float, float] = (0.02, 0.08)
    ack_share: float = 0.7
    nack_share: float = 0.15
    """The rest of the received messages are left to expire."""
    retry_unknown: float = 0.5
    """Chance to resend a batch whose send had an unknown outcome (same dedup ids)."""
    body_max: int = 2048
    """Longest padding of a body (bytes); the seed picks each key's padding."""
    surfaces: tuple[str, ...] = ("native",)
    """The API surfaces the clients use (`tests.chaos.surfaces`): ``native`` is the producers
    and consumers above on `queues`; each other one adds its own queue and clients. Only
    ``native`` by default (the tests that borrow this workload create its queues alone); the
    chaos runner's command line and bounded pass name every one (`SURFACES`)."""


class Recorder:
    """Runs one call of `cmq.client` (one attempt, no retry) and classifies it for the
    history: ``ok``; ``failed`` for a 4xx or a connection that could not be opened (nothing
    was sent); ``unknown`` for everything else (timeouts, dropped connections, 5xx)."""

    def __init__(
        self,
        client: Client,
        urls: dict[int, str],
        history: History,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.urls = urls
        self.history = history
        self.timeout = timeout
        self.clock = clock

    def node(self, node: int) -> Client:
        """The client of ``node`` alone."""
        return self.client.derive([self.urls[node]], timeout=self.timeout, retry=NO_RETRY)

    async def call(self, call: Awaitable[T]) -> tuple[Outcome, T | None, str]:
        """(outcome, the call's result when ok, detail)."""
        try:
            result = await call
        except ConnectFailed as e:
            return "failed", None, e.message
        except ServerError as e:
            outcome: Outcome = "failed" if 400 <= e.status < 500 else "unknown"
            return outcome, None, f"{e.status} {e.code}".strip()
        except CmqError as e:
            return "unknown", None, e.message[:200]
        return "ok", result, ""

    def begin(self, process: str, kind: OpKind, queue: str, node: int) -> Op:
        return self.history.invoke(process, kind, queue, node, self.clock())

    def end(self, op: Op, outcome: Outcome, detail: str) -> None:
        self.history.complete(op, self.clock(), outcome, detail)


class Workload:
    """Producers and consumers against one cluster; `stop_producers`, then `drain`."""

    def __init__(
        self,
        urls: dict[int, str],
        history: History,
        cfg: WorkloadConfig,
        seed: int,
        tag: str,
    ) -> None:
        self.urls = urls
        self.history = history
        self.cfg = cfg
        self.seed = seed
        self.tag = tag
        self.connections: Client | None = None
        self.client: Recorder | None = None
        self._producing = asyncio.Event()
        self._consuming = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._producers: list[asyncio.Task[None]] = []
        self.draining = False
        self.empty_receives = 0
        self.dead_letters: DeadLetters | None = None
        self.stream: Any = None
        self.sqs: Any = None

    @property
    def producing(self) -> bool:
        return self._producing.is_set()

    @property
    def consuming(self) -> bool:
        return self._consuming.is_set()

    @property
    def queues(self) -> tuple[str, ...]:
        """Every queue the clients use (the drain empties them all)."""
        return (*self.cfg.queues, *(q.name for q in surface_queues(self.cfg.surfaces)))

    @property
    def quiet(self) -> bool:
        """While draining: the last receives came back empty, and the dead-letter queue's
        redrive (if any) is over."""
        pending = self.dead_letters is not None and self.dead_letters.pending
        return self.empty_receives >= 2 and not pending

    async def start(self) -> None:
        """Create the surfaces' queues, then start every client."""
        self.connections = Client(list(self.urls.values()), retry=NO_RETRY, connections=64)
        self.client = Recorder(self.connections, self.urls, self.history, self.cfg.request_timeout)
        surfaces = self.cfg.surfaces
        await create_surface_queues(self.client, sorted(self.urls), surface_queues(surfaces))
        self._producing.set()
        self._consuming.set()
        if "native" in surfaces:
            for w in range(self.cfg.producers):
                self._producers.append(asyncio.create_task(self._producer(w)))
        producers = {
            "fifo": FIFO_QUEUE,
            "delay": DELAY_QUEUE,
            "dlq": DLQ_SOURCE,
            "rewind": REWIND_QUEUE,
        }
        for surface, queue in producers.items():
            if surface in surfaces:
                self._producers.append(
                    asyncio.create_task(produce(self, f"{surface}-producer-0", queue))
                )
        if "rewind" in surfaces:  # rewinds stop with the producers: the drain ends
            self._producers.append(asyncio.create_task(rewinder(self, "rewinder-0")))
        if "native" in surfaces:
            for w in range(self.cfg.consumers):
                self._tasks.append(asyncio.create_task(self._consumer(w)))
        for surface, queue in producers.items():
            if surface in surfaces:
                self._tasks.append(
                    asyncio.create_task(self.consume_loop(f"{surface}-consumer-0", [queue]))
                )
        if "stream" in surfaces:
            from tests.chaos.streamclients import StreamClients

            self.stream = StreamClients(self)
            self._producers.append(asyncio.create_task(self.stream.produce()))
            self._tasks.append(asyncio.create_task(self.stream.consume()))
        if "sqs" in surfaces or "dlq" in surfaces:
            from tests.chaos.sqsclients import SqsClients

            self.sqs = await asyncio.to_thread(SqsClients, self)
            if "sqs" in surfaces:
                self._producers.append(asyncio.create_task(self.sqs.produce()))
                self._tasks.append(asyncio.create_task(self.sqs.consume()))
        if "dlq" in surfaces:
            self.dead_letters = DeadLetters(self, self.sqs.redrive)
            self._tasks.append(asyncio.create_task(self.dead_letters.finish()))

    def choices(self, *what: object) -> random.Random:
        """The random stream of one decision (e.g. ``("producer-0", 17)``: its 17th batch),
        fixed by the seed and by what it decides, not by what came before."""
        return random.Random(f"{self.seed}/" + "/".join(map(str, what)))

    def body(self, key: str) -> str:
        """The body sent for ``key``: the key, ``~``, a padding of seeded length."""
        return f"{key}~" + "." * self.choices("body", key).choice(
            [0, 0, 16, 200, self.cfg.body_max // 2, self.cfg.body_max]
        )

    def key_of(self, body: str) -> str:
        """The key of a delivered body; the whole body when it is not one `body` makes."""
        key = body.partition("~")[0]
        return key if body == self.body(key) else body

    async def stop_producers(self) -> None:
        self._producing.clear()
        await asyncio.gather(*self._producers)

    async def stop(self) -> None:
        self._producing.clear()
        self._consuming.clear()
        await asyncio.gather(*self._producers, *self._tasks)
        self._tasks.clear()
        self._producers.clear()
        if self.stream is not None:
            await self.stream.close()
            self.stream = None
        if self.connections is not None:
            await self.connections.close()
            self.connections = None

    # -- producers ---------------------------------------------------------------------------------
    async def _producer(self, w: int) -> None:
        client = self.client
        assert client is not None
        batch = 0
        while self._producing.is_set():
            batch += 1
            rng = self.choices(f"producer-{w}", batch)
            queue = rng.choice(self.cfg.queues)
            keys = [
                f"{self.tag}-p{w}-{batch}-{k}" for k in range(rng.randint(1, self.cfg.batch_max))
            ]
            messages = [Message(self.body(k), dedup_id=k) for k in keys]
            for attempt in range(3):
                pick = self.choices(f"producer-{w}", batch, attempt)
                node = pick.choice(sorted(self.urls))
                op = client.begin(f"producer-{w}", "send", queue, node)
                op.keys = list(keys)
                outcome, _, detail = await client.call(client.node(node).send(queue, messages))
                client.end(op, outcome, detail)
                if outcome == "ok":
                    break
                await asyncio.sleep(0.05)
                resend = pick.random() < self.cfg.retry_unknown
                if outcome == "unknown" and attempt < 2 and resend:
                    continue
                if outcome == "failed" and detail.startswith("connect") and attempt < 2:
                    continue  # nothing was sent: try another node
                break
            await asyncio.sleep(rng.uniform(*self.cfg.produce_gap))

    # -- consumers ---------------------------------------------------------------------------------
    async def _consumer(self, w: int) -> None:
        await self.consume_loop(f"consumer-{w}", list(self.cfg.queues))

    def fate(self, queue: str, d: Delivery) -> str:
        """What a consumer does with a delivered message: ``ack``, ``nack`` or ``ignore`` (its
        lease expires), seeded per key and receive count; everything is acked while draining,
        and a poison key of the dead-letter surface is never acked before."""
        x = self.choices("fate", d.key, d.receive_count).random()
        if self.draining:
            return "ack"
        if queue == DLQ_SOURCE and is_poison(self, d.key):
            return "nack" if x < 0.5 else "ignore"
        if x < self.cfg.ack_share:
            return "ack"
        return "nack" if x < self.cfg.ack_share + self.cfg.nack_share else "ignore"

    async def receive_once(
        self,
        process: str,
        queue: str,
        *,
        vis: int,
        count: int,
        wait: int,
        node: int | None = None,
    ) -> tuple[Op, Recorder]:
        """One recorded receive (through ``node``, else the first one)."""
        client = self.client
        assert client is not None
        node = sorted(self.urls)[0] if node is None else node
        op = client.begin(process, "receive", queue, node)
        op.visibility = float(vis)
        outcome, got, detail = await client.call(
            client.node(node).receive(
                queue,
                count,
                visibility_timeout=vis,
                wait_seconds=wait,
                timeout=client.timeout - wait,  # the whole call within the timeout
            )
        )
        if got is not None:
            op.deliveries = [
                Delivery(self.key_of(str(m.body)), m.seq, m.receipt, m.receive_count) for m in got
            ]
        client.end(op, outcome, detail)
        return op, client

    async def consume_loop(self, process: str, queues: list[str]) -> None:
        """Receive from ``queues`` and settle each message by its `fate` until stopped."""
        turn = 0
        while self._consuming.is_set():
            turn += 1
            rng = self.choices(process, turn)
            draining = self.draining
            queue = rng.choice(queues)
            node = rng.choice(sorted(self.urls))
            vis = 10 if draining else rng.choice(self.cfg.visibilities)
            wait = 1 if draining else rng.choice([0, 1])
            count = 10 if draining else rng.randint(1, self.cfg.receive_max)
            op, client = await self.receive_once(
                process, queue, vis=vis, count=count, wait=wait, node=node
            )
            if op.outcome != "ok":
                await asyncio.sleep(0.05)
                continue
            if not op.deliveries:
                self.empty_receives += 1
                continue
            self.empty_receives = 0
            fates = [self.fate(queue, d) for d in op.deliveries]
            acks = [d for d, f in zip(op.deliveries, fates, strict=True) if f == "ack"]
            nacks = [d for d, f in zip(op.deliveries, fates, strict=True) if f == "nack"]
            if acks:
                await self._settle(client, process, "ack", queue=queue, deliveries=acks, rng=rng)
            if nacks:
                await self._settle(client, process, "nack", queue=queue, deliveries=nacks, rng=rng)

    async def _settle(
        self,
        client: Recorder,
        process: str,
        kind: OpKind,
        *,
        queue: str,
        deliveries: list[Delivery],
        rng: random.Random,
    ) -> None:
        node = rng.choice(sorted(self.urls))
        op = client.begin(process, kind, queue, node)
        op.receipts = [d.receipt for d in deliveries]
        op.keys = [d.key for d in deliveries]
        target = client.node(node)
        call = (
            target.nack(queue, op.receipts, delay_seconds=0)
            if kind == "nack"
            else target.ack(queue, op.receipts)
        )
        outcome, results, detail = await client.call(call)
        if results is not None:
            op.entry_ok = [r.ok for r in results]
            detail = ",".join(sorted({r.error or "" for r in results} - {""}))
        client.end(op, outcome, detail)
