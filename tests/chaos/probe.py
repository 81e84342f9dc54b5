"""What users feel of a fault: per fault, the time until a fresh send to every data group's
queues is confirmed again.

A `Prober` runs beside the workload of a chaos run: one probe queue per data group, and every
``interval`` (20 ms) a one-message send to each of them through a random running node, each
send with its own generous timeout and no retry (many in flight at once), so the figure has
the interval's resolution and measures when the cluster serves again, not when one unlucky
request gives up. Probe sends are kept apart from the history (their messages are never
consumed; the checker's ``lost`` rule would count them).

`recovery` judges one fault: for each probe queue, the time from the fault's injection to the
end of the first confirmed send *started* at or after it; the fault's figure is the worst
queue's (infinite when a queue never confirmed again). `summarize` gives p50 / p99 / max per
fault kind, and `over_bound` the single-node faults (a kill, a pause, the power loss of one
node, alone in their episode) above the bound the project promises (docs/chaos.md,
"Failover after every fault").
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from cmq.client import NO_RETRY
from cmq.errors import CmqError
from tests.chaos.cluster import ChaosCluster

PROBE_PREFIX = "chaos-probe-"
SINGLE_NODE_KINDS = frozenset({"kill", "pause", "power-loss"})
"""Fault kinds whose single-node instances are held to the failover bound."""
FAILOVER_BOUND = 1.5
"""Seconds: after a single-node fault, every queue confirms a fresh send again within this."""


@dataclass(frozen=True, slots=True)
class ProbeSend:
    queue: str
    node: int
    start: float
    end: float
    ok: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class Episode:
    """One fault as the nemesis injected it (monotonic seconds of the runner)."""

    at: float
    kind: str
    description: str
    nodes: tuple[int, ...]
    overlapped: bool
    """Injected with another fault in the same episode."""

    @property
    def single_node(self) -> bool:
        return self.kind in SINGLE_NODE_KINDS and len(self.nodes) == 1 and not self.overlapped

    @property
    def label(self) -> str:
        """The kind the summary files it under."""
        if self.overlapped:
            return "overlapped"
        if self.kind == "power-loss" and len(self.nodes) > 1:
            return "power-loss-all"
        return self.kind


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def recovery(sends: Sequence[ProbeSend], queues: Sequence[str], at: float) -> float:
    """Seconds from ``at`` until every queue of ``queues`` confirmed a send started at or after
    ``at`` (each queue's first such confirm; the worst queue's figure; inf: one never did)."""
    worst = 0.0
    for q in queues:
        ends = [s.end for s in sends if s.queue == q and s.ok and s.start >= at]
        worst = max(worst, (min(ends) - at) if ends else math.inf)
    return worst


@dataclass(slots=True)
class FaultRecovery:
    episode: Episode
    seconds: float
    refusals: str = ""
    """What the probes started in the gap got, most common first (``node error xN``)."""


def refusals(sends: Sequence[ProbeSend], start: float, end: float) -> str:
    """The failed probes started in ``[start, end)``, counted by node and error."""
    counts = Counter(f"n{s.node} {s.error}" for s in sends if not s.ok and start <= s.start < end)
    return ", ".join(f"{what} x{n}" for what, n in counts.most_common(6))


def judge(
    episodes: Sequence[Episode], sends: Sequence[ProbeSend], queues: Sequence[str]
) -> list[FaultRecovery]:
    out = []
    for e in episodes:
        took = recovery(sends, queues, e.at)
        out.append(FaultRecovery(e, took, refusals(sends, e.at, e.at + min(took, 60.0))))
    return out


def summarize(recoveries: Sequence[FaultRecovery]) -> dict[str, tuple[int, float, float, float]]:
    """Per fault label: (count, p50, p99, max) of the recovery seconds."""
    by: dict[str, list[float]] = {}
    for r in recoveries:
        by.setdefault(r.episode.label, []).append(r.seconds)
    return {
        k: (len(v), percentile(v, 50), percentile(v, 99), max(v)) for k, v in sorted(by.items())
    }


def over_bound(recoveries: Sequence[FaultRecovery], bound: float) -> list[FaultRecovery]:
    """The single-node faults whose recovery took longer than ``bound`` seconds."""
    return [r for r in recoveries if r.episode.single_node and r.seconds > bound]


def summary_line(recoveries: Sequence[FaultRecovery]) -> str:
    parts = [
        f"{k} n={n} p50={p50:.3f}s p99={p99:.3f}s max={mx:.3f}s"
        for k, (n, p50, p99, mx) in summarize(recoveries).items()
    ]
    return "time to the next confirmed send after a fault: " + ("; ".join(parts) or "no faults")


@dataclass
class Prober:
    """Probe sends to ``queues`` through random running nodes of ``cluster``."""

    cluster: ChaosCluster
    queues: list[str]
    rng: random.Random
    interval: float = 0.02
    timeout: float = 10.0
    max_in_flight: int = 256
    sends: list[ProbeSend] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _loop: asyncio.Task[None] | None = None
    _count: itertools.count[int] = field(default_factory=itertools.count)

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        nxt = time.monotonic()
        while True:
            running = self.cluster.running()
            if running and len(self._tasks) < self.max_in_flight:
                for q in self.queues:
                    t = asyncio.create_task(self._one(q, self.rng.choice(running)))
                    self._tasks.add(t)
                    t.add_done_callback(self._tasks.discard)
            nxt += self.interval
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))

    async def _one(self, queue: str, nid: int) -> None:
        client = self.cluster.client
        assert client is not None
        node = client.derive([self.cluster.http[nid]], timeout=self.timeout, retry=NO_RETRY)
        start = time.monotonic()
        try:
            await node.send(queue, [f"p{next(self._count)}"])
        except CmqError as e:
            self.sends.append(ProbeSend(queue, nid, start, time.monotonic(), False, _short(e)))
            return
        self.sends.append(ProbeSend(queue, nid, start, time.monotonic(), True))


def _short(e: Exception) -> str:
    text = str(e).split("\n")[0]
    return f"{type(e).__name__}: {text[:60]}"


async def probe_queues(cluster: ChaosCluster, timeout: float = 60) -> list[str]:
    """Create probe queues until every data group holds one; one queue per group."""
    from tests.chaos.runner import create_queues  # the runner imports this module

    by_group: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    for i in itertools.count():
        if len(by_group) >= cluster.groups or time.monotonic() > deadline:
            break
        name = f"{PROBE_PREFIX}{i}"
        await create_queues(cluster, (name,), timeout=max(1.0, deadline - time.monotonic()))
        g = await cluster.group_of(name)
        if g is not None and g not in by_group:
            by_group[g] = name
    return [by_group[g] for g in sorted(by_group)]
