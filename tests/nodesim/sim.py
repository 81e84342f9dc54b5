"""The whole node under the deterministic simulator (FoundationDB's and TigerBeetle's way:
simulate the real code, not a model of it).

N real `cmq.node.queue_node.QueueNode`s (router, leader ops, housekeeping, membership, catalog,
state machines, the raftlog runtime `MultiRaft`) run on one virtual-time event loop
(`tests.nodesim.process.ProcessLoop`) over the in-memory twins of their I/O
(`cmq.node.host.NodeHost`): a seeded `raftlog.transport.memory.MemoryNetwork`, memory disks
that lose their unsynced tail on power loss (`raftlog.storage.memory`), memory segment stores
that lose unflushed writes (`cmq.node.host.MemoryFiles`), and a `raftlog.runtime.host.LoopClock`
per node. Clients call the nodes' `QueueService` methods (send, receive, ack, nack) through any
node, so the router forwards; every call is recorded in a `tests.chaos.history.History` whose
times are the loop's virtual seconds.

Faults, from the seed: a node killed (SIGKILL: what it wrote survives) or losing power (its
disks keep a random prefix of what they had not synced, its segment stores what they last
flushed) and restarted from its disks; every node losing power at once; a process paused
(SIGSTOP: its callbacks are held by the loop and its frames by the network, then released);
a node isolated, the cluster split, a link cut, and healed; frame delays, stragglers and loss;
one node's clock stepped (a little, within the clock guard's bound, or hours); the fault points
of `raftlog.buggify` (slow fsync completions, dropped frames, early snapshots, delayed and
abandoned calls, retries without backoff).

After the faults heal, the workload stops, a drain receives and acks every queue until each is
empty (through the service: its leader's stats), and the checks run (`tests.nodesim.checks`, with
the observer's while it runs):

- the chaos checker (`tests.chaos.checker.check`): no confirmed message lost, nothing delivered
  that was never sent, no redelivery after a confirmed ack, at most one unexpired lease per
  message (within the clock bound), no two leases from one state;
- no message stored twice: clients never resend a key, so two seqs for one key are a send the
  system repeated;
- replicas identical: every replica of each data group at the same applied index, with the
  same image and segment hashes (`QueueNode.group_digest`); every node's catalog image equal;
- no call hangs: each returns within its deadline (unless its node was paused or killed);
- no group halts, no replica loses entries it acknowledged, one leader per (group, term);
- every node starts (recovers) after each crash.

A run's shape is a `NodeSimConfig`, its record a `NodeSimResult` (`tests.nodesim.runs`, both
importable from here). Everything derives from the seed: the same seed gives the same history
(`NodeSimResult.digest`).
``python -m tests.nodesim --seeds N`` runs seeds and prints a replay command for each failure.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import random
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TypeVar, cast

from cmq.errors import CmqError, InvariantBroken, OutcomeUnknown
from cmq.node.config import NodeConfig
from cmq.node.host import MemoryFiles, NodeHost
from cmq.node.queue_node import QueueNode
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN
from raftlog import buggify
from raftlog.runtime import GroupOptions
from raftlog.runtime.host import LoopClock, inline
from raftlog.storage.memory import MemoryDiskOptions, MemoryDisks
from raftlog.transport.memory import MemoryNetwork, NetFaults
from raftlog.transport.peer import Address
from raftlog.transport.protocol import ProtocolRange
from tests.nodesim import checks
from tests.nodesim.failover import FailoverNemesis, Prober
from tests.nodesim.faults import SlowDisks, seeded_ids, virtual_scrub_pace
from tests.nodesim.nemesis import Nemesis
from tests.nodesim.plants import planted
from tests.nodesim.process import NeutralLoop, Process, ProcessLoop, ProcessTransport
from tests.nodesim.runs import NodeSimConfig, NodeSimResult
from tests.nodesim.workload import EPOCH_MS, Workload

__all__ = [
    "CLOCK_BOUND_MS",
    "REQUEST_TIMEOUT",
    "SECRET",
    "SPEAKS",
    "NodeSim",
    "NodeSimConfig",
    "NodeSimResult",
    "run_node_seed",
]

T = TypeVar("T")

SECRET = b"nodesim-cluster-secret-0123456789"
SPEAKS = ProtocolRange(PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX)
REQUEST_TIMEOUT = 4.0
CLOCK_BOUND_MS = 200.0


@dataclass(slots=True)
class _Node:
    id: int
    cfg: NodeConfig
    files: MemoryFiles
    clock: LoopClock
    incarnation: int = 0
    proc: Process | None = None
    node: QueueNode | None = None
    ready: bool = False
    """Started (recovered) and not crashed since."""
    death: asyncio.Future[None] | None = None
    """Resolved when this incarnation dies (its pending calls are abandoned)."""


class NodeSim:
    """One seeded run (use `run_node_seed`)."""

    def __init__(self, seed: int, cfg: NodeSimConfig) -> None:
        self.seed = seed
        self.cfg = cfg
        self.loop = ProcessLoop()
        self.neutral = NeutralLoop(self.loop)
        self.rng = self._rng("run")
        self.request_timeout = REQUEST_TIMEOUT
        self.clock_bound_ms = CLOCK_BOUND_MS
        self.result = NodeSimResult(seed, cfg)
        self.ids = tuple(range(1, cfg.nodes + 1))
        self.groups = cfg.groups or self.rng.choice((1, 2))
        self.net = MemoryNetwork(cast(asyncio.AbstractEventLoop, self.neutral), self._rng("net"))
        self.disk_options = (
            MemoryDiskOptions(unsafe_early_ack=True, late_sync=(1.0, 3.0))
            if cfg.plant == "early_ack"
            else MemoryDiskOptions()
        )
        self.disks = MemoryDisks(
            cast(asyncio.AbstractEventLoop, self.neutral), self._rng("disk"), self.disk_options
        )
        self.slow_disks = SlowDisks(self.disks, self.neutral)
        self.workload = Workload(self, fifo=cfg.fifo, rewind=cfg.rewind)
        self.nemesis: Nemesis | FailoverNemesis = (
            FailoverNemesis(self, self._rng("faults"))
            if cfg.failover
            else Nemesis(self, self._rng("faults"))
        )
        self.prober = Prober(self, self._rng("probe")) if cfg.failover else None
        self.snapshot_entries = self.rng.choice((30, 100, 400))
        self.nodes = {nid: self._make_node(nid) for nid in self.ids}
        self.leaders: dict[tuple[int, int], int] = {}
        self.led: dict[int, tuple[int, int, bool]] = {}
        """(``failover``) per group, its leader as last noted: (node, term, clock trusted)."""

    def _rng(self, name: str) -> random.Random:
        return random.Random(f"nodesim/{self.seed}/{name}")

    def _make_node(self, nid: int) -> _Node:
        dirs = 2 if self.rng.random() < 0.3 else 1
        data_dirs = tuple(f"/nodesim/n{nid}/d{i}" for i in range(dirs))
        peers = {i: Address(f"n{i}.sim", 7000) for i in self.ids}
        cfg = NodeConfig(
            node_id=nid,
            peer=peers[nid],
            peers=peers,
            data_dirs=data_dirs,
            secret=SECRET,
            groups=self.groups,
            request_timeout=REQUEST_TIMEOUT,
            tick_interval=0.05,
            housekeeping_interval=0.5,
            group_options=GroupOptions(
                snapshot_entries=self.snapshot_entries, keep_entries=self.snapshot_entries // 4
            ),
            replication=3,
            segment_max_bytes=4096,
            segment_max_age=5.0,
            clock_bound_ms=CLOCK_BOUND_MS,
        )
        return _Node(nid, cfg, MemoryFiles(), LoopClock(self.loop, EPOCH_MS))

    # -- trace -----------------------------------------------------------------------------------
    def note(self, text: str) -> None:
        self.result.trace.append(f"{self.loop.time():8.3f} {text}")

    def violation(self, text: str) -> None:
        """Record a violation (once: the observer sees a broken state again every look)."""
        if text not in self.result.violations:
            self.result.violations.append(text)
            self.note(f"VIOLATION {text}")

    # -- processes -------------------------------------------------------------------------------
    def start_node(self, nid: int) -> None:
        n = self.nodes[nid]
        n.incarnation += 1
        proc = Process(f"n{nid}#{n.incarnation}", n.clock)
        transport = ProcessTransport(self.net, nid, self.ids, protocols=SPEAKS, process=proc)
        host = NodeHost(
            transport=transport,
            disks=self.slow_disks,
            clock=n.clock,
            offload=inline,
            segments=n.files.segment_store,
            files=n.files,
            seed=self.rng.getrandbits(64),
        )
        node = QueueNode(n.cfg, host)
        n.proc, n.node, n.ready = proc, node, False
        n.death = self.loop.create_future()
        self.note(f"start n{nid} (incarnation {n.incarnation})")
        task = proc.spawn(node.start())
        task.add_done_callback(lambda t: self._started(n, proc, t))

    def _started(self, n: _Node, proc: Process, task: asyncio.Task[None]) -> None:
        if n.proc is not proc or proc.dead:
            return
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.violation(f"n{n.id} failed to start: {type(exc).__name__}: {exc}")
            return
        n.ready = True
        self.note(f"n{n.id} started")

    def kill(self, nid: int, *, power: bool) -> None:
        """SIGKILL (what was written survives) or a power loss (only what was synced does)."""
        n = self.nodes[nid]
        proc, node = n.proc, n.node
        if proc is None or node is None:
            return
        self.loop.kill(proc)
        transport = node.raft.transport
        assert isinstance(transport, ProcessTransport)
        transport.crash(notify=not power)
        self.net.resume(nid)
        for d in n.cfg.data_dirs:
            if d in self.disks:
                disk = self.disks[d]
                if power:
                    lost = disk.power_loss()
                    self.note(f"n{nid} {d}: kept {lost.kept} lost {lost.lost} torn {lost.torn}")
                else:
                    disk.close()  # the page cache outlives the process
        if power:
            n.files.power_loss()
            self.result.power_losses += 1
        else:
            for store in n.files.stores.values():
                store.flush()
            n.files.power_loss()  # the next incarnation starts with empty indexes
            self.result.crashes += 1
        n.proc, n.node, n.ready = None, None, False
        if n.death is not None and not n.death.done():
            n.death.set_result(None)
        self.note(f"{'power loss' if power else 'kill'} n{nid}")

    def pause(self, nid: int) -> None:
        n = self.nodes[nid]
        if n.proc is None:
            return
        self.loop.pause(n.proc)
        self.net.pause(nid)
        self.result.pauses += 1
        self.note(f"pause n{nid}")

    def resume(self, nid: int) -> None:
        n = self.nodes[nid]
        self.net.resume(nid)
        if n.proc is not None and n.proc.paused:
            self.loop.resume(n.proc)
            self.note(f"resume n{nid}")

    def up(self) -> list[int]:
        """Nodes that run (started, not crashed, not paused)."""
        return [
            i
            for i in self.ids
            if self.nodes[i].ready
            and self.nodes[i].proc is not None
            and not self.nodes[i].proc.paused  # type: ignore[union-attr]
        ]

    def callable_nodes(self) -> list[int]:
        """Nodes a client may call (started, not crashed; a paused one just does not answer)."""
        return [i for i in self.ids if self.nodes[i].ready]

    # -- calls -----------------------------------------------------------------------------------
    async def call(
        self, nid: int, bound: float, fn: Callable[[QueueNode], Awaitable[T]]
    ) -> tuple[str, T | None, str]:
        """Run ``fn(node)`` as node ``nid``'s process, as a client would call it: (outcome,
        value, detail) with outcome ``ok``, ``failed`` (nothing happened) or ``unknown``."""
        n = self.nodes[nid]
        proc, node, death = n.proc, n.node, n.death
        if proc is None or node is None or death is None:
            return "failed", None, "node down (connection refused)"
        disturbed = proc.disturbed

        async def run() -> T:
            return await fn(node)

        task = proc.spawn(run())
        limit = bound
        abandon = buggify.buggify("client.abandon")
        if abandon:
            limit = buggify.uniform(0.0, bound)
        done, _ = await asyncio.wait({task, death}, timeout=limit, return_when="FIRST_COMPLETED")
        if task not in done:
            task.cancel()  # the client went away (an HTTP handler is cancelled)
            if death in done:
                return "unknown", None, "node died during the call"
            if abandon:
                return "unknown", None, "client went away"
            if proc.disturbed == disturbed and not proc.dead:
                self.violation(f"a call to n{nid} hung past its deadline ({bound:.1f} s)")
            return "unknown", None, "timed out"
        if task.cancelled():
            return "unknown", None, "cancelled"
        exc = task.exception()
        if exc is None:
            return "ok", task.result(), ""
        if isinstance(exc, OutcomeUnknown):
            return "unknown", None, f"{type(exc).__name__}: {exc}"
        if isinstance(exc, InvariantBroken):
            self.violation(f"n{nid}: {type(exc).__name__}: {exc}")
            return "unknown", None, str(exc)
        if isinstance(exc, CmqError):
            return "failed", None, f"{type(exc).__name__}: {exc}"
        self.violation(f"n{nid}: unexpected {type(exc).__name__}: {exc}")
        return "unknown", None, repr(exc)

    def heal(self) -> None:
        """Every fault ends: links heal, nodes resume or restart, clocks agree, and the fault
        points stop firing (liveness is judged on a healthy cluster)."""
        bugs = buggify.current()
        if bugs is not None:
            bugs.fire_chance = 0.0
        self.net.heal_all()
        self.net.faults = NetFaults()
        for nid in self.ids:
            self.resume(nid)
            self.nodes[nid].clock.offset_ms = 0
            if self.nodes[nid].proc is None:
                self.start_node(nid)
        self.nemesis.faulted.clear()
        self.note("healed")

    # -- the run ---------------------------------------------------------------------------------
    async def main(self) -> None:
        for nid in self.ids:
            self.start_node(nid)
        observer = self.loop.create_task(checks.observe(self))
        stop = asyncio.Event()
        workers: list[asyncio.Task[None]] = []
        work = self.workload
        try:
            await work.create_queues()
            workers = [
                self.loop.create_task(work.producer(i, stop)) for i in range(self.cfg.producers)
            ] + [self.loop.create_task(work.consumer(i, stop)) for i in range(self.cfg.consumers)]
            if self.cfg.rewind:
                workers.append(self.loop.create_task(work.rewinder(stop)))
            probe_stop = asyncio.Event()
            if self.prober is not None:
                await self.prober.create_queues()
                workers.append(self.loop.create_task(self.prober.run(probe_stop)))
            if self.cfg.faults:
                await self.nemesis.run(self.loop.time() + self.cfg.seconds)
            else:
                await asyncio.sleep(self.cfg.seconds)
            if self.prober is not None:
                await checks.judge_failovers(self, probe_stop)
            self.heal()
            stop.set()
            await asyncio.gather(*workers)
            await self.nemesis.settle()
            await work.drain(self.cfg.heal_seconds + self.cfg.drain_seconds)
            await checks.check_replicas(self)
            checks.check_history(self)
            self.result.unknown = work.unknown
            self.result.deliveries = work.deliveries
        finally:
            observer.cancel()
            for t in workers:
                t.cancel()
            await asyncio.gather(observer, *workers, return_exceptions=True)
            for nid in self.ids:
                if self.nodes[nid].proc is not None:
                    self.loop.kill(self.nodes[nid].proc)  # type: ignore[arg-type]

    def digest(self) -> str:
        h = hashlib.sha256()
        for op in self.workload.history.ops:
            h.update(json.dumps(op.to_json(), sort_keys=True).encode())
        for line in self.result.trace:
            h.update(line.encode())
        return h.hexdigest()


def run_node_seed(seed: int, cfg: NodeSimConfig | None = None) -> NodeSimResult:
    """Run one seed on a fresh loop (the fault points of `raftlog.buggify` on, unless the
    configuration says otherwise)."""
    cfg = cfg or NodeSimConfig()
    sim = NodeSim(seed, cfg)
    with ExitStack() as stack:
        stack.enter_context(planted(cfg.plant))
        stack.enter_context(seeded_ids(sim._rng("ids")))
        if cfg.failover:  # a change of every mode's runs: kept to the new mode
            stack.enter_context(virtual_scrub_pace(cast(asyncio.AbstractEventLoop, sim.loop)))
        fault_points = cfg.buggify and not cfg.failover  # failover: single-node faults only
        bugs = stack.enter_context(buggify.enabled(sim._rng("buggify"))) if fault_points else None
        try:
            sim.loop.run_until_complete(sim.main())
        finally:
            sim.result.virtual_seconds = sim.loop.time()
            sim.loop.close()
        if bugs is not None:
            sim.result.buggified = dict(sorted(bugs.fired.items()))
    sim.result.digest = sim.digest()
    result = sim.result
    del sim
    # The killed processes' tasks go now, with the fault points off (their coroutines run
    # their ``finally`` blocks as they are collected), not at some moment of the next run.
    gc.collect()
    return result
