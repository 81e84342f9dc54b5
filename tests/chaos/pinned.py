"""The ``pinned`` fault: a majority/minority partition with clients pinned to each side.

While the peer links between a minority and the rest are cut (paused or dropped, as in
``partition``), three clients run: a producer and a consumer that talk only to minority nodes,
and a consumer (receive, then ack) that talks only to a majority node. Their operations go into
the run's history under the process names ``pinned<episode>-minority-producer``,
``pinned<episode>-minority-consumer`` and ``pinned<episode>-majority-consumer``
(`tests.chaos.checker.check_pinned` reads them): a minority-side client must get errors and
never a confirm; the majority-side consumer must keep getting answers.

The clients start once the partition is in place and are stopped (their last request answered
or timed out) before it is healed, so every recorded operation ran entirely inside it. The
minority is one node, or on 5 nodes or more sometimes two nodes that are a minority of every
group's voters (with R replicas of N nodes, two nodes can hold two of a group's three
replicas: that is not a minority of the group). The fault is exclusive: a process fault at
the same time could take the majority side's quorum away.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cmq.client import Message
from tests.chaos.checker import PINNED
from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import Injected, split_blocks
from tests.chaos.history import Delivery, History
from tests.chaos.proxy import Mode
from tests.chaos.workload import Recorder

REQUEST_TIMEOUT = 2.0
"""Per request of a pinned client (short: a hold lasts a few seconds)."""


@dataclass
class PinnedClients:
    name: str = "pinned"
    exclusive: bool = True
    category: str = "network"
    weight: int = 2
    history: History | None = None
    """The run's history (set by the runner before the first injection)."""
    tag: str = "pin"
    """Prefix of the message keys (unique in the run)."""
    queues: tuple[str, ...] = ("chaos-a",)
    key_of: Callable[[str], str] = str
    """A delivered body's key (the workload's `key_of`, set by the runner)."""
    episodes: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return None if cluster.n >= 3 else "needs 3 nodes or more"

    async def minority(self, cluster: ChaosCluster, rng: random.Random) -> list[int]:
        """One node; on 5+ nodes, half of the time two that are a minority of every group."""
        ids = cluster.ids
        if cluster.n >= 5 and rng.random() < 0.5:
            voters = [
                set(info["voters"])
                for st in (await cluster.statuses()).values()
                for info in st["groups"].values()
            ]
            pairs = [
                list(p)
                for p in itertools.combinations(ids, 2)
                if voters and all(2 * len(v & set(p)) < len(v) for v in voters)
            ]
            if pairs:
                return rng.choice(pairs)
        return [rng.choice(ids)]

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        history = self.history
        assert history is not None and cluster.client is not None
        if cluster.running() != cluster.ids:
            return None  # a node down: the majority side might have no quorum
        minority = await self.minority(cluster, rng)
        majority = [n for n in cluster.ids if n not in minority]
        mode: Mode = rng.choice(["pause", "drop"])
        await cluster.set_blocks(split_blocks(minority, majority, mode))
        episode = next(self.episodes)
        rec = Recorder(cluster.client, cluster.http, history, REQUEST_TIMEOUT)
        stop = asyncio.Event()
        seed = rng.getrandbits(64)
        prefix = f"{PINNED}{episode}"
        tasks = [
            asyncio.create_task(self._produce(rec, prefix, minority, stop, random.Random(seed))),
            asyncio.create_task(
                self._consume(rec, f"{prefix}-minority-consumer", minority, stop, seed + 1)
            ),
            asyncio.create_task(
                self._consume(rec, f"{prefix}-majority-consumer", majority, stop, seed + 2)
            ),
        ]

        async def heal() -> str:
            stop.set()
            await asyncio.gather(*tasks)  # each request ends within REQUEST_TIMEOUT
            await cluster.heal_network()
            ops = [o for o in history.ops if o.process.startswith(f"{prefix}-")]
            minor = [o for o in ops if "-minority-" in o.process]
            major = [o for o in ops if "-majority-" in o.process]
            return (
                f"minority ops {len(minor)} (ok {sum(o.outcome == 'ok' for o in minor)}), "
                f"majority ops {len(major)} (ok {sum(o.outcome == 'ok' for o in major)})"
            )

        what = f"pinned clients: minority {sorted(minority)} | majority {majority} ({mode})"
        return Injected(self.name, what, minority, rng.uniform(4.5, 6.5), heal, "network")

    async def _produce(
        self,
        rec: Recorder,
        prefix: str,
        nodes: list[int],
        stop: asyncio.Event,
        rng: random.Random,
    ) -> None:
        batch = 0
        while not stop.is_set():
            batch += 1
            keys = [f"{self.tag}-{prefix}-{batch}-{k}" for k in range(rng.randint(1, 3))]
            node = rng.choice(nodes)
            queue = rng.choice(self.queues)
            op = rec.begin(f"{prefix}-minority-producer", "send", queue, node)
            op.keys = list(keys)
            call = rec.node(node).send(queue, [Message(k, dedup_id=k) for k in keys])
            outcome, _, detail = await rec.call(call)
            rec.end(op, outcome, detail)
            await asyncio.sleep(0.1)

    async def _consume(
        self, rec: Recorder, process: str, nodes: list[int], stop: asyncio.Event, seed: int
    ) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            node = rng.choice(nodes)
            queue = rng.choice(self.queues)
            op = rec.begin(process, "receive", queue, node)
            op.visibility = 5.0
            outcome, got, detail = await rec.call(
                rec.node(node).receive(
                    queue, rng.randint(1, 5), visibility_timeout=5, wait_seconds=0
                )
            )
            if got is not None:
                op.deliveries = [
                    Delivery(self.key_of(str(m.body)), m.seq, m.receipt, m.receive_count)
                    for m in got
                ]
            rec.end(op, outcome, detail)
            if op.deliveries and "-majority-" in process:
                ack = rec.begin(process, "ack", queue, node)
                ack.receipts = [d.receipt for d in op.deliveries]
                ack.keys = [d.key for d in op.deliveries]
                outcome, results, detail = await rec.call(rec.node(node).ack(queue, ack.receipts))
                if results is not None:
                    ack.entry_ok = [r.ok for r in results]
                rec.end(ack, outcome, detail)
            await asyncio.sleep(0.1)
