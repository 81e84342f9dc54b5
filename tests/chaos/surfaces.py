"""The API surfaces of a chaos run beyond native send/receive on standard queues: which ones a
run has (`WorkloadConfig.surfaces`), their queues, and the native-API producers of FIFO
groups, delayed messages and messages for a queue with a dead-letter queue, plus the
end-of-run read of the dead-letter queue and the redrive back.

Every surface has its own queue, so the native clients' queues and choices are those of a run
without them. Choices draw from `Workload.choices` keyed by the surface's process name and the
decision's number, as the native clients do (workload.py's docstring).

* ``fifo``: ``chaos-f.fifo``; one producer sends batches of 1-5 messages of one group (3
  groups), one batch at a time, dedup id = key, resending an unknown outcome with the same ids
  half of the time; its consumer acks, nacks or ignores like the native ones.
* ``delay``: ``chaos-d``, the scheduling features: ``max_delay_seconds`` raised above 900
  (`DELAY_ATTRIBUTES`) and a ``retry`` back-off policy (1 s, doubling, at most 4 s); each
  message of a batch is sent with ``delay_seconds`` of 1-3 s, with a ``deliver_at`` 1-3 s
  ahead of the runner's wall clock (the same time on every resend), or at once, and a seeded
  share of them with a ``ttl_seconds`` of 1-6 s (some expire unseen, some while leased).
  Delays stay seconds long to keep runs short; a few messages (`FAR_SHARE`) are scheduled
  beyond 900 s with a time to live of seconds, so they expire unseen before their time. Each
  batch names a fair-queue tenant (group id ``t0``..``t2`` by batch number, no draw), so
  its receives go round-robin over tenants beside the delays, time to live and back-off.
* ``dlq``: ``chaos-r`` with dead-letter queue ``chaos-r-dlq`` after 2 receives, both with 4
  priority levels (a batch's messages at level batch % 4, no draw); a seeded third
  of the keys is *poison* (its consumer never acks them: nack or let expire), so they move.
  When the run drains, `DeadLetters.finish` waits until the source is empty (nothing more can
  move), reads the whole dead-letter queue (recorded receives), releases it, redrives it back
  with an SQS ``StartMessageMoveTask`` (recorded as a ``move`` op) and waits for the task to
  end; the drain then consumes the copies from the source.
* ``rewind``: ``chaos-w`` keeps acknowledged messages (``retain_acked_seconds``,
  `REWIND_ATTRIBUTES`); a producer and a consumer as for the queues above, and a rewinder
  (`rewinder`) that, while the producers run, asks a random node every 1-3 s (seeded) to rewind
  the queue to 0.5-4 s before the runner's wall clock (``POST .../rewind``), or further back,
  to just before the send of the message acked last (`acked_send_wall`), when that is less than
  `REWIND_REACH` seconds ago, so each rewind must bring at least one acknowledged message back
  even when the consumer lags seconds behind a loaded machine; each a recorded
  ``rewind`` op with its ``since``, its outcome and the count the cluster answered; the sends
  record the wall clock (``Op.wall``) so the checker can place them against ``since``
  (`tests.chaos.rewindcheck`). The drain consumes the copies.
* ``stream``, ``sqs``: `tests.chaos.streamclients`, `tests.chaos.sqsclients`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cmq.client import Message
from cmq.errors import CmqError

if TYPE_CHECKING:
    from tests.chaos.history import Op
    from tests.chaos.workload import Recorder, Workload

SURFACES = ("native", "fifo", "delay", "dlq", "rewind", "stream", "sqs")
"""Every surface, in the order `--surfaces` lists them (the default: all)."""

FIFO_QUEUE = "chaos-f.fifo"
DELAY_QUEUE = "chaos-d"
DLQ_SOURCE = "chaos-r"
DLQ_QUEUE = "chaos-r-dlq"
REWIND_QUEUE = "chaos-w"
STREAM_QUEUE = "chaos-s"
SQS_QUEUE = "chaos-q"
MAX_RECEIVES = 2
"""``max_receive_count`` of `DLQ_SOURCE`."""
PRIORITIES = 4
"""Priority levels of `DLQ_SOURCE` and `DLQ_QUEUE`: a batch's messages take level batch % 4
(no draw), so leases, dead-letter moves and the redrive carry levels under the faults (the
replicas' image digests compare the levels' state)."""
DELAY_ATTRIBUTES: dict[str, Any] = {
    "visibility_timeout": 2,
    "max_delay_seconds": 3600,
    "retry": {"initial_seconds": 1, "multiplier": 2, "max_seconds": 4},
}
"""`DELAY_QUEUE`'s attributes: delays beyond 900 s allowed, retry back-off 1, 2, 4, 4... s."""
TTL_SHARE = 0.3
"""Share of the `DELAY_QUEUE` messages sent with a time to live."""
FAR_SHARE = 0.05
"""Share of the `DELAY_QUEUE` messages scheduled beyond 900 s (up to 50 minutes, inside the
queue's hour) with a time to live of 1-3 s: accepted because of the raised
``max_delay_seconds``, and expired long before their time, so they must never be delivered
(nor hold up the drain)."""
POISON_SHARE = 0.33
REWIND_ATTRIBUTES: dict[str, Any] = {"visibility_timeout": 2, "retain_acked_seconds": 600}
"""`REWIND_QUEUE`'s attributes: acknowledged messages kept for 10 minutes (longer than a run)."""
REWIND_GAP = (1.0, 3.0)
"""Seconds between two rewinds."""
REWIND_BACK = (0.5, 4.0)
"""How far before the runner's wall clock a rewind's ``since`` is (seconds)."""
REWIND_REACH = 12.0
"""A rewind reaches back to the last acked message's send when that send began less than this
many seconds ago (else `REWIND_BACK` alone decides)."""
REWIND_MARGIN = 1.0
"""How far before that send's start ``since`` then is (the checker's send tolerance, 0.5 s,
plus slack)."""


@dataclass(frozen=True, slots=True)
class SurfaceQueue:
    """A queue a surface needs, created (in this order) before the clients start."""

    name: str
    attributes: dict[str, Any]


def surface_queues(surfaces: tuple[str, ...]) -> list[SurfaceQueue]:
    """The queues of ``surfaces`` (not the native ones, which the runner creates)."""
    out = []
    if "fifo" in surfaces:
        out.append(SurfaceQueue(FIFO_QUEUE, {"visibility_timeout": 2, "fifo": True}))
    if "delay" in surfaces:
        out.append(SurfaceQueue(DELAY_QUEUE, dict(DELAY_ATTRIBUTES)))
    if "dlq" in surfaces:
        out.append(SurfaceQueue(DLQ_QUEUE, {"visibility_timeout": 2, "priorities": PRIORITIES}))
        out.append(
            SurfaceQueue(
                DLQ_SOURCE,
                {
                    "visibility_timeout": 2,
                    "dead_letter_queue": DLQ_QUEUE,
                    "max_receive_count": MAX_RECEIVES,
                    "priorities": PRIORITIES,
                },
            )
        )
    if "rewind" in surfaces:
        out.append(SurfaceQueue(REWIND_QUEUE, dict(REWIND_ATTRIBUTES)))
    if "stream" in surfaces:
        out.append(SurfaceQueue(STREAM_QUEUE, {"visibility_timeout": 2}))
    if "sqs" in surfaces:
        out.append(SurfaceQueue(SQS_QUEUE, {"visibility_timeout": 2}))
    return out


def consumed_queues(surfaces: tuple[str, ...]) -> list[str]:
    """Queues a surface consumer of the native API receives from (not the dead-letter queue,
    read by `DeadLetters.finish`, nor the stream and SQS queues, which have their own)."""
    picks = {"fifo": FIFO_QUEUE, "delay": DELAY_QUEUE, "dlq": DLQ_SOURCE, "rewind": REWIND_QUEUE}
    return [q for s, q in picks.items() if s in surfaces]


async def create_surface_queues(
    recorder: Recorder, nodes: list[int], queues: list[SurfaceQueue], timeout: float = 60
) -> None:
    """Create ``queues`` (retried until ``timeout``), each recorded as a ``create`` op whose
    detail is its attributes as JSON (what the checker learns the queue's kind from)."""
    deadline = time.monotonic() + timeout
    for q in queues:
        attempt = 0
        while True:
            node = nodes[attempt % len(nodes)]
            attempt += 1
            op = recorder.begin("setup", "create", q.name, node)
            outcome, _, detail = await recorder.call(
                recorder.node(node).create_queue(q.name, q.attributes)
            )
            recorder.end(op, outcome, json.dumps(q.attributes) if outcome == "ok" else detail)
            if outcome == "ok":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not create queue {q.name}: {detail}")
            await asyncio.sleep(0.5)


def is_poison(workload: Workload, key: str) -> bool:
    """Whether the consumers never ack ``key`` during the faults (a `DLQ_SOURCE` message)."""
    return workload.choices("poison", key).random() < POISON_SHARE


async def produce(workload: Workload, process: str, queue: str) -> None:
    """A producer of ``queue`` (`FIFO_QUEUE`, `DELAY_QUEUE`, `DLQ_SOURCE` or `REWIND_QUEUE`):
    batches of 1-5 keys with dedup ids, one at a time, until the producers stop; an unknown
    outcome is resent with the same ids half of the time, a refused connection on another
    node."""
    client = workload.client
    assert client is not None
    nodes = sorted(workload.urls)
    batch = 0
    while workload.producing:
        batch += 1
        rng = workload.choices(process, batch)
        keys = [f"{workload.tag}-{process}-{batch}-{k}" for k in range(rng.randint(1, 5))]
        group = f"g{rng.randrange(3)}" if queue == FIFO_QUEUE else None
        tenant = f"t{batch % 3}" if queue == DELAY_QUEUE else None  # fair queues: no draw
        priority = batch % PRIORITIES if queue == DLQ_SOURCE else 0  # priorities: no draw
        plan = schedule(workload, process, batch, len(keys)) if queue == DELAY_QUEUE else None
        delays = plan.delays if plan else []
        messages = [
            Message(
                workload.body(k),
                dedup_id=k,
                group_id=group or tenant,
                delay_seconds=delays[i] or None if delays else None,
                deliver_at=plan.deliver_at[i] if plan else None,
                ttl_seconds=plan.ttls[i] or None if plan else None,
                priority=priority,
            )
            for i, k in enumerate(keys)
        ]
        for attempt in range(3):
            pick = workload.choices(process, batch, attempt)
            node = pick.choice(nodes)
            op = client.begin(process, "send", queue, node)
            op.keys = list(keys)
            op.groups = [group] * len(keys) if group else []
            op.delays = [float(d) for d in delays]
            if plan is not None or queue == REWIND_QUEUE:
                op.wall = time.time()
            if plan is not None:
                op.deliver_at = [0.0 if t is None else t.timestamp() for t in plan.deliver_at]
                op.ttls = [float(t) for t in plan.ttls]
            outcome, _, detail = await client.call(client.node(node).send(queue, messages))
            client.end(op, outcome, detail)
            if outcome == "ok":
                break
            await asyncio.sleep(0.05)
            if outcome == "unknown" and attempt < 2 and pick.random() < 0.5:
                continue
            if outcome == "failed" and detail.startswith("connect") and attempt < 2:
                continue
            break
        await asyncio.sleep(rng.uniform(0.05, 0.15))


async def rewinder(workload: Workload, process: str) -> None:
    """Rewind `REWIND_QUEUE` through a random node every `REWIND_GAP` seconds, to `REWIND_BACK`
    seconds before the runner's wall clock, until the producers stop (module doc)."""
    client = workload.client
    assert client is not None
    nodes = sorted(workload.urls)
    turn = 0
    while True:
        turn += 1
        rng = workload.choices(process, turn)
        await asyncio.sleep(rng.uniform(*REWIND_GAP))
        if not workload.producing:
            break
        node = rng.choice(nodes)
        op = client.begin(process, "rewind", REWIND_QUEUE, node)
        op.wall = time.time()
        op.since = op.wall - rng.uniform(*REWIND_BACK)
        acked = acked_send_wall(workload.history.ops, REWIND_QUEUE)
        if acked is not None and op.wall - REWIND_REACH < acked - REWIND_MARGIN < op.since:
            op.since = acked - REWIND_MARGIN
        since = datetime.fromtimestamp(op.since, UTC)
        outcome, count, detail = await client.call(client.node(node).rewind(REWIND_QUEUE, since))
        if count is not None:
            op.rewound = count
        client.end(op, outcome, detail)


def acked_send_wall(ops: Sequence[Op], queue: str) -> float | None:
    """The wall clock at which the first send of the message acked last (the latest ok ack
    entry, among completed ops) on ``queue`` began; None before any."""
    key: str | None = None
    at: float | None = None
    for op in reversed(ops):
        if op.queue != queue:
            continue
        if key is None:
            if op.kind == "ack" and op.outcome == "ok":
                key = next((k for k, ok in zip(op.keys, op.entry_ok, strict=False) if ok), None)
        elif op.kind == "send" and key in op.keys:
            at = op.wall
    return at


@dataclass(frozen=True, slots=True)
class Schedule:
    """The scheduling of one `DELAY_QUEUE` batch, per message: ``delays`` in seconds (0:
    none), ``deliver_at`` (None: none; never both), ``ttls`` in seconds (0: none)."""

    delays: list[int]
    deliver_at: list[datetime | None]
    ttls: list[int]


def schedule(workload: Workload, process: str, batch: int, n: int) -> Schedule:
    """Batch ``batch``'s `Schedule` (its own seeded stream; ``deliver_at`` counts from the
    runner's wall clock now, once per batch, so a resend names the same time)."""
    rng = workload.choices(process, batch, "schedule")
    now = datetime.now(UTC)
    delays: list[int] = []
    at: list[datetime | None] = []
    ttls: list[int] = []
    for _ in range(n):
        mode = rng.choice(("delay", "delay", "deliver_at", "deliver_at", "now"))
        seconds = rng.uniform(1.0, 3.0)
        ttl = rng.randint(1, 6) if rng.random() < TTL_SHARE else 0
        if rng.random() < FAR_SHARE:  # beyond 900 s, expiring first
            mode = rng.choice(("delay", "deliver_at"))
            seconds, ttl = rng.uniform(901.0, 3000.0), rng.randint(1, 3)
        delays.append(round(seconds) if mode == "delay" else 0)
        at.append(now + timedelta(seconds=seconds) if mode == "deliver_at" else None)
        ttls.append(ttl)
    return Schedule(delays, at, ttls)


class DeadLetters:
    """The end of the ``dlq`` surface (module doc): read the dead-letter queue, redrive it."""

    def __init__(self, workload: Workload, move: Callable[[], Any]) -> None:
        """``move``: starts the move task and waits for its end, returning (outcome, detail)
        (blocking: run in a thread; `tests.chaos.sqsclients.redrive`)."""
        self.workload = workload
        self.move = move
        self.pending = True
        """Until the redrive ended (or failed): the drain is not over before."""

    async def _empty(self, queue: str) -> bool:
        client = self.workload.client
        assert client is not None
        for node in sorted(self.workload.urls):
            try:
                stats = (await client.node(node).get_queue(queue)).stats
            except CmqError:
                continue
            return not (stats.visible or stats.in_flight or stats.delayed)
        return False

    async def finish(self) -> None:
        """Once the run drains: wait for an empty source, read and release every dead-letter
        message (recorded), redrive them back; then consume what is left (ack everything)."""
        w = self.workload
        client = w.client
        assert client is not None
        while not w.draining and w.consuming:
            await asyncio.sleep(0.2)
        if not w.consuming:
            self.pending = False
            return
        try:
            while w.consuming and not await self._empty(DLQ_SOURCE):
                await asyncio.sleep(0.5)
            receipts: list[tuple[str, str]] = []
            empty = 0
            while w.consuming and empty < 2:
                op, _ = await w.receive_once("dlq-reader", DLQ_QUEUE, vis=30, count=10, wait=1)
                if op.outcome == "ok" and not op.deliveries:
                    empty += 1
                receipts += [(d.receipt, d.key) for d in op.deliveries]
            for i in range(0, len(receipts), 50):
                chunk = receipts[i : i + 50]
                op = client.begin("dlq-reader", "nack", DLQ_QUEUE, sorted(w.urls)[0])
                op.receipts, op.keys = [r for r, _ in chunk], [k for _, k in chunk]
                outcome, results, detail = await client.call(
                    client.node(op.node).nack(DLQ_QUEUE, op.receipts, delay_seconds=0)
                )
                if results is not None:
                    op.entry_ok = [r.ok for r in results]
                client.end(op, outcome, detail)
            op = client.begin("dlq-redrive", "move", DLQ_QUEUE, sorted(w.urls)[0])
            try:
                outcome, detail = await asyncio.to_thread(self.move)
            except Exception as e:  # recorded: the drain then shows what is left
                outcome, detail = "unknown", f"{type(e).__name__}: {e}"[:300]
            client.end(op, outcome, detail)
        finally:
            self.pending = False
        await w.consume_loop("dlq-reader", [DLQ_QUEUE])
