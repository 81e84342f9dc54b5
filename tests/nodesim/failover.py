"""Failover mode of the whole-node simulator (``--failover``, `NodeSimConfig.failover`): what
a user feels after a single-node fault, in virtual time.

- `FailoverNemesis` injects single-node faults only, one at a time, from the run's ``faults``
  generator: SIGKILL one node or cut its power (half the time a node leading some group) and
  restart it 0.5-4 s later, or pause one node for 1-3 s; after each heal (the restarted node
  started, or the paused one resumed) a quiet gap of 1-3 s. No network faults but the default
  network's weather, no clock steps; the fault points of `raftlog.buggify` are off in this mode
  (`tests.nodesim.sim.run_node_seed`): a forgotten leader hint or a dropped frame is a second
  fault, and ``client.abandon`` would cut probes short.
- `Prober`: dedicated probe queues (``probe-0``, ``probe-1``, ... until each data group holds
  one, as the catalog places them; kept out of the workload's history, whose checker would call
  their never-consumed messages lost), and every 20 ms one one-message send to each of them
  through a random running node (`NodeSim.up`), each a `NodeSim.call` bounded by 10 s and never
  retried, recorded as a `ProbeSend`.
- `recovery` judges one fault: for each probe queue, the time from the fault's injection to
  the end of the first confirmed send started at or after it; the fault's figure is the worst
  queue's (infinite when one never confirmed again). Above `NodeSimConfig.failover_bound` it is
  a violation naming the fault.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cmq.model import OutgoingMessage, QueueAttributes
from raftlog.core import Role
from tests.chaos.probe import ProbeSend, recovery

__all__ = ["ProbeSend", "recovery"]

if TYPE_CHECKING:
    from cmq.node.queue_node import QueueNode
    from tests.nodesim.sim import NodeSim

PROBE_PREFIX = "probe-"
PROBE_INTERVAL = 0.02
PROBE_BOUND = 10.0
MAX_PROBE_QUEUES = 64
KINDS = ("kill", "power-loss", "pause")


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected single-node fault (virtual seconds)."""

    at: float
    kind: str
    node: int
    leader_of: tuple[int, ...]
    """The groups the victim led when it was hit."""
    heal_after: float

    def describe(self) -> str:
        led = f" (leader of g{','.join(map(str, self.leader_of))})" if self.leader_of else ""
        return f"{self.kind} n{self.node}{led} at {self.at:.3f} for {self.heal_after:.2f} s"


def first_confirm(sends: Sequence[ProbeSend], queue: str, at: float) -> float:
    """The end of the first confirmed send to ``queue`` started at or after ``at`` (inf:
    none)."""
    return min(
        (s.end for s in sends if s.queue == queue and s.ok and s.start >= at), default=math.inf
    )


def worst_wait(
    sends: Sequence[ProbeSend], queues: Sequence[str], start: float, end: float
) -> tuple[float, float]:
    """The longest a send had to wait for a confirm in ``[start, end)`` (one fault's episode:
    its injection, the heal, the quiet after): for ``start`` and each probe start in the window,
    the time until every queue confirmed a send started at or after it (cut at ``end``: the
    next fault's injection), worst first; returns
    (seconds, the moment it was started). ``recovery`` is this at ``start`` alone; the window
    also sees a gap that opens later (a hand-back of leadership to the restarted node)."""
    moments = sorted({start} | {s.start for s in sends if start <= s.start < end})
    worst, at = 0.0, start
    by_queue = []
    for q in queues:
        ok = sorted((s.start, s.end) for s in sends if s.queue == q and s.ok and s.start >= start)
        suffix = [math.inf] * (len(ok) + 1)  # suffix[i]: the first end among ok[i:]
        for i in range(len(ok) - 1, -1, -1):
            suffix[i] = min(ok[i][1], suffix[i + 1])
        by_queue.append(([st for st, _ in ok], suffix))
    for m in moments:
        took = 0.0
        for starts, suffix in by_queue:
            took = max(took, suffix[bisect.bisect_left(starts, m)] - m)
        took = min(took, end - m)  # beyond ``end`` the wait is the next fault's
        if took > worst:
            worst, at = took, m
    return worst, at


def refusals(sends: Sequence[ProbeSend], start: float, end: float) -> str:
    """The failed probes started in ``[start, end)``, counted by node, queue and error."""
    counts = Counter(
        f"n{s.node} {s.queue} {s.error}" for s in sends if not s.ok and start <= s.start < end
    )
    return ", ".join(f"{what} x{n}" for what, n in counts.most_common(8))


class Prober:
    """Probe sends to one queue per data group through random running nodes."""

    def __init__(self, sim: NodeSim, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.queues: list[str] = []
        self.group_of: dict[str, int] = {}
        self.sends: list[ProbeSend] = []
        self._inflight: set[asyncio.Task[None]] = set()

    async def create_queues(self) -> None:
        """Create ``probe-0``, ``probe-1``, ... until every data group holds one (a queue's
        group as the creating node's catalog has it); keep one per group."""
        sim = self.sim
        attrs = QueueAttributes(visibility_timeout=2)
        for i in range(MAX_PROBE_QUEUES):
            name = f"{PROBE_PREFIX}{i}"
            while True:
                nodes = sim.callable_nodes()
                if nodes:
                    nid = self.rng.choice(nodes)
                    outcome, _, _ = await sim.call(
                        nid, 2 * sim.request_timeout + 3, self._creator(name, attrs)
                    )
                    node = sim.nodes[nid].node
                    if outcome == "ok" and node is not None:
                        group = node.catalog.group_of(name)
                        if group is not None:
                            break
                await asyncio.sleep(0.2)
            if group not in self.group_of.values():
                self.queues.append(name)
                self.group_of[name] = group
                sim.note(f"probe queue {name} in g{group}")
            node = sim.nodes[nid].node
            if node is not None and set(self.group_of.values()) >= set(node.catalog.data_groups):
                return
        sim.violation(f"no probe queue for every data group in {MAX_PROBE_QUEUES} tries")

    @staticmethod
    def _creator(name: str, attrs: QueueAttributes) -> Callable[[QueueNode], Awaitable[object]]:
        return lambda q: q.create_queue(name, attrs)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            up = self.sim.up()
            if up:
                for q in self.queues:
                    nid = self.rng.choice(up)
                    task = self.sim.loop.create_task(self._send(q, nid))
                    self._inflight.add(task)
                    task.add_done_callback(self._inflight.discard)
            await asyncio.sleep(PROBE_INTERVAL)
        await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def _send(self, queue: str, nid: int) -> None:
        sim = self.sim
        start = sim.loop.time()
        msg = [OutgoingMessage(body=b"probe")]
        outcome, _, detail = await sim.call(nid, PROBE_BOUND, lambda q: q.send(queue, msg))
        self.sends.append(ProbeSend(queue, nid, start, sim.loop.time(), outcome == "ok", detail))

    def confirmed_since(self, at: float) -> bool:
        """Whether every probe queue confirmed a send started at or after ``at``."""
        return all(first_confirm(self.sends, q, at) < math.inf for q in self.queues)


class FailoverNemesis:
    """Single-node faults, one at a time, each followed by a quiet gap (module docstring)."""

    def __init__(self, sim: NodeSim, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.faults: list[Fault] = []
        self.faulted: set[int] = set()  # what `NodeSim.heal` clears

    def _leads(self, nid: int) -> tuple[int, ...]:
        node = self.sim.nodes[nid].node
        if node is None:
            return ()
        return tuple(
            sorted(g for g, d in node.raft.groups.items() if d.raw.raft.role is Role.LEADER)
        )

    def _victim(self) -> int | None:
        sim = self.sim
        healthy = sim.up()
        if len(healthy) < len(sim.ids):
            return None
        if self.rng.random() < 0.5:
            leaders = [i for i in healthy if self._leads(i)]
            if leaders:
                return self.rng.choice(leaders)
        return self.rng.choice(healthy)

    async def run(self, until: float) -> None:
        sim, rng = self.sim, self.rng
        await asyncio.sleep(rng.uniform(1.0, 3.0))
        while sim.loop.time() < until:
            victim = self._victim()
            if victim is None:  # someone still not up: wait for it
                await asyncio.sleep(0.1)
                continue
            kind = rng.choice(KINDS)
            heal_after = rng.uniform(1.0, 3.0) if kind == "pause" else rng.uniform(0.5, 4.0)
            fault = Fault(sim.loop.time(), kind, victim, self._leads(victim), heal_after)
            self.faults.append(fault)
            sim.note(f"FAULT #{len(self.faults)} {fault.describe()}")
            self.faulted.add(victim)
            if kind == "pause":
                sim.pause(victim)
                await asyncio.sleep(heal_after)
                sim.resume(victim)
            else:
                sim.kill(victim, power=kind == "power-loss")
                await asyncio.sleep(heal_after)
                sim.start_node(victim)
                for _ in range(600):  # ready (recovered), or 60 s
                    if sim.nodes[victim].ready:
                        break
                    await asyncio.sleep(0.01)
            self.faulted.discard(victim)
            await asyncio.sleep(rng.uniform(1.0, 3.0))

    async def settle(self) -> None:
        """Nothing outlives `run`."""
