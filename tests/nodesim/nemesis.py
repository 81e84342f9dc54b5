"""The faults of the whole-node simulator, on a schedule drawn from the run's ``faults``
generator: every 0.3-1.5 virtual seconds one of (by weight):

=========  ==================================================================================
weight     fault
=========  ==================================================================================
16         kill a node (SIGKILL) or cut its power, restart it 0.2-3 s later
4          cut the power of every node at once, restart each 0.2-1.5 s later
12         pause a node's process for 0.3-4 s
12         isolate a node
6          split the cluster in two
6          cut one link
14         heal every link
10         new network weather: delays, stragglers, loss
14         step one node's clock a little (within the clock bound) or a lot, back 0.5-4 s later
           (while fewer than a minority of the clocks are off; ``clock_leaps``: always two
           hours ahead, on a node leading some group when there is one)
6          (five nodes or more) drain a node (its replicas move away), activate it 2-8 s later
8          (``--rot``) flip a byte of a sealed segment on a running node, run its scrubber:
           it counts as faulted until repaired from its peers
=========  ==================================================================================

Half the time the victim of a kill or a pause is a node leading some group. At most a minority
of the nodes is killed or paused at a time (but for the power loss of every node).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from cmq.fsm.memory import MemorySegmentStore
from raftlog.core import Role
from raftlog.transport.memory import NetFaults

if TYPE_CHECKING:
    from cmq.node.queue_node import QueueNode
    from tests.nodesim.sim import NodeSim


class Nemesis:
    """Injects the faults of one run (see the module docstring)."""

    def __init__(self, sim: NodeSim, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.faulted: set[int] = set()
        """Nodes killed or paused now."""
        self.budget = (len(sim.ids) - 1) // 2
        self.drained: int | None = None
        """The node drained now (one at a time)."""
        self.ever_drained: set[int] = set()
        self.rotting: dict[int, set[int]] = {}
        """Per data group, the nodes whose damaged replica of it is being repaired."""
        self._admin: list[asyncio.Task[None]] = []
        faults: list[tuple[int, Callable[[], None]]] = [
            (16, self.kill_one),
            (4, self.power_loss_everywhere),
            (12, self.pause_one),
            (12, self.isolate),
            (6, self.split),
            (6, self.cut_link),
            (14, self.heal_links),
            (10, self.weather),
            (14, self.step_clock),
        ]
        if len(sim.ids) >= 5:
            faults.append((6, self.drain_one))
        if sim.cfg.rot:
            faults.append((8, self.rot_one))
        self._weights = [w for w, _ in faults]
        self._faults = [f for _, f in faults]

    async def run(self, until: float) -> None:
        loop = self.sim.loop
        while loop.time() < until:
            await asyncio.sleep(self.rng.uniform(0.3, 1.5))
            self.rng.choices(self._faults, self._weights)[0]()

    # -- processes -------------------------------------------------------------------------------
    def _healthy(self) -> list[int]:
        sim = self.sim
        return [i for i in sim.ids if i not in self.faulted and sim.nodes[i].ready]

    def _leaders(self, among: list[int]) -> list[int]:
        """The nodes of ``among`` leading some group."""
        return [
            i
            for i in among
            if (node := self.sim.nodes[i].node) is not None
            and any(d.raw.raft.role is Role.LEADER for d in node.raft.groups.values())
        ]

    def _victim(self, among: list[int]) -> int:
        """Half the time a node that leads some group (the interesting victim)."""
        if self.rng.random() < 0.5:
            leaders = self._leaders(among)
            if leaders:
                return self.rng.choice(leaders)
        return self.rng.choice(among)

    def _spare(self) -> list[int]:
        """The healthy nodes a new fault may take: none once ``budget`` nodes are faulted."""
        return self._healthy() if len(self.faulted) < self.budget else []

    def _take_victim(self) -> int | None:
        """A spare node (`_victim`), counted as faulted from now on; None when none is spare."""
        spare = self._spare()
        if not spare:
            return None
        victim = self._victim(spare)
        self.faulted.add(victim)
        return victim

    def kill_one(self) -> None:
        victim = self._take_victim()
        if victim is None:
            return
        self.sim.kill(victim, power=self.rng.random() < 0.5)
        self._later(self.rng.uniform(0.2, 3.0), self._restart, victim)

    def power_loss_everywhere(self) -> None:
        if self.faulted:
            return
        sim = self.sim
        for nid in sim.ids:
            sim.kill(nid, power=True)
        self.faulted.update(sim.ids)
        sim.note("power loss of every node")
        for nid in sim.ids:
            self._later(self.rng.uniform(0.2, 1.5), self._restart, nid)

    def pause_one(self) -> None:
        victim = self._take_victim()
        if victim is None:
            return
        self.sim.pause(victim)
        self._later(self.rng.uniform(0.3, 4.0), self._resume, victim)

    def _later(self, delay: float, fn: Callable[[int], None], nid: int) -> None:
        self.sim.loop.call_later(delay, fn, nid)

    def _restart(self, nid: int) -> None:
        if self.sim.nodes[nid].proc is None:
            self.sim.start_node(nid)
        self.faulted.discard(nid)

    def _resume(self, nid: int) -> None:
        self.sim.resume(nid)
        self.faulted.discard(nid)

    # -- the network -----------------------------------------------------------------------------
    def isolate(self) -> None:
        sim = self.sim
        a = self.rng.choice(sim.ids)
        sim.net.isolate(a, [b for b in sim.ids if b != a])
        sim.result.partitions += 1
        sim.note(f"isolate n{a}")

    def split(self) -> None:
        sim = self.sim
        side = self.rng.sample(sim.ids, len(sim.ids) // 2)
        for a in side:
            for b in sim.ids:
                if b not in side:
                    sim.net.cut(a, b)
        sim.result.partitions += 1
        sim.note(f"split {sorted(side)} from the rest")

    def cut_link(self) -> None:
        a, b = self.rng.sample(self.sim.ids, 2)
        self.sim.net.cut(a, b)
        self.sim.note(f"cut n{a}-n{b}")

    def heal_links(self) -> None:
        sim = self.sim
        sim.net.heal_all()
        for nid in sim.ids:
            proc = sim.nodes[nid].proc
            if proc is not None and proc.paused:
                sim.net.pause(nid)  # heal_all resumed a paused node's frames too
        sim.note("heal the network")

    def weather(self) -> None:
        rng, sim = self.rng, self.sim
        sim.net.faults = NetFaults(
            delay=rng.choice(((0.0005, 0.01), (0.002, 0.05), (0.01, 0.15))),
            slow=rng.choice((0.0, 0.01, 0.05)),
            loss=rng.choice((0.0, 0.0, 0.01, 0.05)),
        )
        f = sim.net.faults
        sim.note(f"network: delay {f.delay} slow {f.slow} loss {f.loss}")

    # -- clocks ----------------------------------------------------------------------------------
    def step_clock(self) -> None:
        """Step one node's clock, unless a minority's clocks are off already: the clock guard
        takes the majority of the clocks for the time (two of three clocks stepped alike, as
        the discrete steps here make likely, outvote the right one; seed 13148)."""
        rng, sim = self.rng, self.sim
        off = [i for i in sim.ids if sim.nodes[i].clock.offset_ms]
        if len(off) >= self.budget:
            return
        on = [i for i in sim.ids if i not in off]
        if sim.cfg.clock_leaps:
            leaders = self._leaders(on)
            nid = rng.choice(leaders or on)
            step = 7_200_000
        else:
            nid = rng.choice(on)
            if rng.random() < 0.5:
                step = rng.choice((-1, 1)) * rng.randint(10, int(sim.clock_bound_ms * 0.4))
            else:
                step = rng.choice((-1, 1)) * rng.choice((2_000, 60_000, 7_200_000))
        sim.nodes[nid].clock.offset_ms = step
        sim.result.clock_steps += 1
        sim.note(f"clock of n{nid} stepped to {step:+d} ms")
        self._later(rng.uniform(0.5, 4.0), self._reset_clock, nid)

    def _reset_clock(self, nid: int) -> None:
        clock = self.sim.nodes[nid].clock
        if clock.offset_ms:
            clock.offset_ms = 0
            self.sim.note(f"clock of n{nid} back")

    # -- storage ---------------------------------------------------------------------------------
    def rot_one(self) -> None:
        """Flip a byte of a sealed segment on a running node (its read cache dropped, so a cold
        read meets it) and run that node's scrubber: the node counts as faulted until the
        replica is repaired from its peers (``--rot``)."""
        rng, sim = self.rng, self.sim
        spare = self._spare()
        if not spare:
            return
        nid = rng.choice(spare)
        node = sim.nodes[nid].node
        if node is None or node.raft.repairs.stats().under_repair:
            return
        # One damaged replica per group at a time: two of a group's three replicas reset at
        # once leave it without a quorum for good (beyond the promise, docs/chaos.md).
        sealed = [
            (g, machine, seg)
            for g, machine in sorted(node.machines.items())
            if not self.rotting.get(g)
            for name in machine.queue_names()
            for seg in machine.sealed_segments(name)
        ]
        if not sealed:
            return
        g, machine, (key, first, size) = rng.choice(sealed)
        store = machine.store
        if not isinstance(store, MemorySegmentStore):
            return
        store.segments[(key, first)][rng.randrange(size)] ^= 1 << rng.randrange(8)
        store.drop_cache()
        self.faulted.add(nid)
        self.rotting.setdefault(g, set()).add(nid)
        sim.result.rots += 1
        sim.note(f"rot n{nid} g{g} {key}/{first} ({size} B)")
        self._admin.append(sim.loop.create_task(self._scrub(nid, node, g)))

    async def _scrub(self, nid: int, node: QueueNode, group: int) -> None:
        """The node's scrubber pass, then wait (up to 30 s) until the group's repair is done."""
        try:
            before = node.raft.repairs.completed
            await node.scrubber.scrub_pass()
            for _ in range(300):
                if not node.raft.repairs.under_way(group):
                    break
                await asyncio.sleep(0.1)
            if node.raft.repairs.completed > before:
                self.sim.result.repaired += 1
                self.sim.note(f"n{nid} repaired")
            else:
                self.sim.note(
                    f"n{nid} not repaired: scrub {node.scrubber.stats()} "
                    f"repairs {node.raft.repairs.stats()}"
                )
        finally:
            self.faulted.discard(nid)
            self.rotting.get(group, set()).discard(nid)

    # -- membership ------------------------------------------------------------------------------
    def drain_one(self) -> None:
        """Drain a node through a random node (an operator's ``cmq node drain``); activate it
        again a few seconds later."""
        if self.drained is not None:
            return
        nid = self.drained = self.rng.choice(self.sim.ids)
        self.ever_drained.add(nid)
        self._admin.append(self.sim.loop.create_task(self._membership(nid, drain=True)))
        self.sim.loop.call_later(self.rng.uniform(2.0, 8.0), self._activate, nid)

    def _activate(self, nid: int) -> None:
        if self.drained == nid:
            self._admin.append(self.sim.loop.create_task(self.activate(nid)))

    async def activate(self, nid: int) -> None:
        """Activate ``nid``, retrying until it takes."""
        while not await self._membership(nid, drain=False):
            await asyncio.sleep(0.5)
        if self.drained == nid:
            self.drained = None

    async def _membership(self, nid: int, *, drain: bool) -> bool:
        sim = self.sim
        nodes = sim.callable_nodes()
        if not nodes:
            return False
        via = self.rng.choice(nodes)
        what = "drain" if drain else "activate"
        outcome, _, detail = await sim.call(
            via,
            2 * sim.request_timeout + 1,
            (lambda q: q.drain_node(nid)) if drain else (lambda q: q.activate_node(nid)),
        )
        sim.note(f"{what} n{nid} via n{via}: {outcome} {detail}".rstrip())
        return outcome == "ok"

    async def settle(self) -> None:
        """After the faults: the membership calls under way are done, then the drained node
        (if any) is active again (a slow drain may have taken effect after its activation)."""
        await asyncio.gather(*self._admin, return_exceptions=True)
        for nid in sorted(self.ever_drained):
            await self.activate(nid)
