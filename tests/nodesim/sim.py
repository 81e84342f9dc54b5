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
empty (through the service: its leader's stats), and the checks run:

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

Everything derives from the seed: the same seed gives the same history (`NodeSimResult.digest`).
``python -m tests.nodesim --seeds N`` runs seeds and prints a replay command for each failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import hashlib
import json
import random
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from cmq.errors import CmqError, InvariantBroken, OutcomeUnknown
from cmq.node.config import NodeConfig
from cmq.node.host import MemoryFiles, NodeHost
from cmq.node.queue_node import QueueNode
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN
from raftlog import buggify
from raftlog.core import Role
from raftlog.errors import ProposalDropped, is_storage_damage
from raftlog.runtime import GroupOptions
from raftlog.runtime.host import LoopClock, inline
from raftlog.storage.memory import MemoryDiskOptions, MemoryDisks
from raftlog.transport.memory import MemoryNetwork, NetFaults
from raftlog.transport.peer import Address
from raftlog.transport.protocol import ProtocolRange
from tests.chaos.checker import check, compare_digests
from tests.nodesim.failover import FailoverNemesis, Prober, recovery, refusals, worst_wait
from tests.nodesim.faults import SlowDisks, seeded_ids, virtual_scrub_pace
from tests.nodesim.nemesis import Nemesis
from tests.nodesim.plants import planted
from tests.nodesim.process import NeutralLoop, Process, ProcessLoop, ProcessTransport
from tests.nodesim.workload import EPOCH_MS, Workload

T = TypeVar("T")

SECRET = b"nodesim-cluster-secret-0123456789"
SPEAKS = ProtocolRange(PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX)
REQUEST_TIMEOUT = 4.0
CLOCK_BOUND_MS = 200.0


@dataclass(frozen=True, slots=True)
class NodeSimConfig:
    """One run's shape; what is not set here is drawn from the seed."""

    nodes: int = 3
    seconds: float = 12.0
    """Virtual seconds of workload under faults."""
    groups: int | None = None
    """Data groups (None: 1 or 2, drawn from the seed)."""
    producers: int = 3
    consumers: int = 3
    fifo: bool = True
    """Also a FIFO queue."""
    faults: bool = True
    buggify: bool = True
    heal_seconds: float = 15.0
    """After healing: how long every group may take to answer again."""
    drain_seconds: float = 60.0
    plant: str | None = None
    """A planted bug (`tests.nodesim.plants`)."""
    rot: bool = False
    """Sealed segments of running nodes rot now and then (a flipped byte): the node's scrubber
    finds it and the replica is repaired from its peers (`raftlog.runtime.repair`)."""
    rewind: bool = False
    """A queue that keeps acknowledged messages, rewound every 1-2 s (`tests.nodesim.workload`),
    judged by the chaos checker's rewind rules (`tests.chaos.rewindcheck`)."""
    failover: bool = False
    """Single-node faults only, one at a time, and a prober measuring, per fault, the time
    until every data group confirms a fresh send again (`tests.nodesim.failover`); the fault
    points are off in this mode."""
    failover_bound: float = 1.5
    """Seconds (``failover``): a fault whose recovery takes longer is a violation."""
    clock_leaps: bool = False
    """Every clock step is a leap two hours ahead on a node leading some group: the fault the
    clock guard exists for, made the common case (the ``unguarded_clock`` plant's run)."""


@dataclass(slots=True)
class NodeSimResult:
    seed: int
    cfg: NodeSimConfig
    violations: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    ops: int = 0
    confirmed: int = 0
    """Messages whose send was confirmed."""
    acked: int = 0
    """Messages whose ack was confirmed."""
    deliveries: int = 0
    unknown: int = 0
    crashes: int = 0
    power_losses: int = 0
    pauses: int = 0
    partitions: int = 0
    clock_steps: int = 0
    rots: int = 0
    """Segment files damaged (``NodeSimConfig.rot``)."""
    repaired: int = 0
    """Of those, replicas the scrubber found and that were repaired from their peers."""
    rewinds: int = 0
    """Rewind requests (``NodeSimConfig.rewind``), whatever their outcome."""
    rewound: int = 0
    """Messages the ok rewinds said they brought back."""
    copies_allowed: int = 0
    """Redeliveries after an ack the rewind rules allowed (per key, the rewinds covering it)."""
    copies: int = 0
    """Redeliveries after an ack seen (fresh deliveries of rewound copies)."""
    buggified: dict[str, int] = field(default_factory=dict)
    digest: str = ""
    """A hash of the whole history and trace: equal for equal runs."""
    virtual_seconds: float = 0.0
    failovers: list[tuple[str, float]] = field(default_factory=list)
    """(``NodeSimConfig.failover``) per fault, its kind and the seconds until every data group
    confirmed a fresh send again (inf: one never did)."""

    def replay(self) -> str:
        """The command that runs this seed again (the options `python -m tests.nodesim`
        has; a configuration it cannot express is named after it)."""
        cfg = self.cfg
        cmd = (
            f"PYTHONHASHSEED=0 python -m tests.nodesim --seeds 1 --seed {self.seed} "
            f"--nodes {cfg.nodes} --seconds {cfg.seconds:g}"
        )
        if cfg.plant:
            cmd += f" --plant {cfg.plant}"
        if not cfg.buggify:
            cmd += " --no-buggify"
        if cfg.rot:
            cmd += " --rot"
        if cfg.rewind:
            cmd += " --rewind"
        if cfg.failover:
            cmd += " --failover"
        if cfg.clock_leaps:
            cmd += " --clock-leaps"
        rest = NodeSimConfig(
            nodes=cfg.nodes,
            seconds=cfg.seconds,
            plant=cfg.plant,
            buggify=cfg.buggify,
            rot=cfg.rot,
            rewind=cfg.rewind,
            failover=cfg.failover,
            clock_leaps=cfg.clock_leaps,
        )
        return cmd if rest == cfg else f"{cmd}  # with {cfg}"


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

    async def observer(self) -> None:
        """Every 50 ms: halted groups, replicas that lost acknowledged entries, two leaders in
        one term, and the ``raft.early_snapshot`` fault point. A group halted on damage while
        its repair is under way, and a replica a repair reset (it lost its damaged copy on
        purpose, and votes again only once caught up), are expected (``--rot``)."""
        while True:
            await asyncio.sleep(0.05)
            for nid in self.ids:
                n = self.nodes[nid]
                if n.node is None or n.proc is None or n.proc.paused:
                    continue
                for g, d in list(n.node.raft.groups.items()):
                    repairing = is_storage_damage(d.stopped) if d.stopped else False
                    if (
                        d.stopped is not None
                        and not isinstance(d.stopped, ProposalDropped)
                        and not (repairing and n.node.raft.repairs.under_way(g))
                    ):
                        self.violation(f"group {g} on n{nid} halted: {d.stopped!r}")
                    r = d.raw.raft
                    if r.lost_acknowledged and not d.reset_by_repair:
                        self.violation(f"group {g} on n{nid} lost entries it had acknowledged")
                    if r.role is Role.LEADER:
                        other = self.leaders.setdefault((g, r.term), nid)
                        if other != nid:
                            self.violation(f"two leaders of group {g} in term {r.term}")
                    if buggify.buggify("raft.early_snapshot"):
                        self.loop.call_soon(d.request_snapshot, context=n.proc.context())
            if self.cfg.failover:
                self._note_leaders()

    def _note_leaders(self) -> None:
        """(``failover``) note each group's leader when it (or its clock's trust) changes: the
        running leader of the highest term among the nodes up."""
        now: dict[int, tuple[int, int, bool]] = {}
        for nid in self.ids:
            n = self.nodes[nid]
            if n.node is None or n.proc is None or n.proc.paused:
                continue
            for g, d in n.node.raft.groups.items():
                r = d.raw.raft
                if r.role is Role.LEADER and (g not in now or now[g][1] < r.term):
                    now[g] = (nid, r.term, n.node.clock.trusted())
        for g in sorted(set(now) | set(self.led)):
            if now.get(g) != self.led.get(g):
                if g in now:
                    nid, term, trusted = now[g]
                    clock = "" if trusted else " (clock NOT trusted: stamps nothing)"
                    self.note(f"g{g} leader n{nid} term {term}{clock}")
                else:
                    self.note(f"g{g} no leader up")
        self.led = now

    # -- failover --------------------------------------------------------------------------------
    async def _judge_failovers(self, stop: asyncio.Event) -> None:
        """(``failover``) probe on until every queue confirmed a send started after the last
        fault (at most 20 s more), then judge each fault's recovery."""
        prober, nemesis = self.prober, self.nemesis
        assert prober is not None and isinstance(nemesis, FailoverNemesis)
        last = nemesis.faults[-1].at if nemesis.faults else self.loop.time()
        deadline = self.loop.time() + 20.0
        while self.loop.time() < deadline and not prober.confirmed_since(last):
            await asyncio.sleep(0.1)
        stop.set()
        while prober._inflight:
            await asyncio.sleep(0.1)
        bound = self.cfg.failover_bound
        ends = [f.at for f in nemesis.faults[1:]] + [self.loop.time()]
        for i, (f, end) in enumerate(zip(nemesis.faults, ends, strict=True), 1):
            first = recovery(prober.sends, prober.queues, f.at)
            took, at = worst_wait(prober.sends, prober.queues, f.at, end)
            took = max(took, first)
            self.result.failovers.append((f.kind, took))
            why = refusals(prober.sends, at, at + min(took, 60.0))
            self.result.trace.append(
                f"{f.at + first:8.3f} RECOVERED #{i} {f.describe()}: {first:.3f} s"
            )
            late = f" (sends from {at:.3f} waited {took:.3f} s)" if took > first else ""
            if late:
                self.result.trace.append(f"{at + took:8.3f} LATE GAP #{i}{late}")
            if took > bound:
                self.violation(
                    f"failover: #{i} {f.describe()}: no fresh send confirmed on every data "
                    f"group for {took:.3f} s{late or ' after it'} (bound {bound:g} s)"
                    + (f"; refused: {why}" if why else "")
                )
            elif why:
                self.result.trace.append(f"{at + took:8.3f}   refused #{i}: {why}")
        self.result.trace.sort(key=lambda line: float(line[:8]))

    # -- the end ---------------------------------------------------------------------------------
    async def check_replicas(self) -> None:
        """Wait for every replica to apply the same index, then compare their state."""
        deadline = self.loop.time() + self.cfg.heal_seconds
        while self.loop.time() < deadline and not self._converged():
            await asyncio.sleep(0.1)
        if not self._converged():
            self.violation(f"replicas did not converge: {self._applied()}")
            return
        nodes = {nid: self.nodes[nid].node for nid in self.ids}
        catalogs = {nid: n.catalog.snapshot() for nid, n in nodes.items() if n is not None}
        if len(set(catalogs.values())) > 1:
            self.violation("catalog images differ between nodes at equal applied index")
        digests: dict[int, dict[int, dict[str, Any]]] = {}
        for g, hosts in self._hosts().items():
            for nid in hosts:
                outcome, d, detail = await self.call(nid, 5.0, lambda q, g=g: q.group_digest(g))
                if outcome != "ok" or d is None:
                    self.violation(f"group {g}: no digest from n{nid}: {detail}")
                    continue
                digests.setdefault(g, {})[nid] = dataclasses.asdict(d)
        for problem in compare_digests(digests):
            self.violation(problem)

    def _hosts(self) -> dict[int, tuple[int, ...]]:
        """Each data group's replicas (as the first running node's catalog has them)."""
        for nid in self.ids:
            node = self.nodes[nid].node
            if node is not None:
                cat = node.catalog
                return {
                    g: tuple(sorted(p.hosts()))
                    for g in cat.data_groups
                    if (p := cat.placement(g)) is not None
                }
        return {}

    def _applied(self) -> dict[int, dict[int, tuple[int, int]]]:
        out: dict[int, dict[int, tuple[int, int]]] = {}
        groups = {0: self.ids} | self._hosts()
        for g, hosts in groups.items():
            for nid in hosts:
                node = self.nodes[nid].node
                if node is None or g not in node.raft.groups:
                    out.setdefault(g, {})[nid] = (-1, -1)
                    continue
                st = node.raft.status(g)
                out.setdefault(g, {})[nid] = (st.applied, st.commit)
        return out

    def _converged(self) -> bool:
        for by_node in self._applied().values():
            seen = set(by_node.values())
            if len(seen) != 1 or any(a != c or a < 0 for a, c in seen):
                return False
        return True

    def check_history(self) -> None:
        ops = self.workload.history.ops
        rep = check(ops, tolerance=2 * CLOCK_BOUND_MS / 1000 + 0.05)
        self.result.ops = rep.ops
        self.result.confirmed = rep.acked
        self.result.acked = rep.consumed
        self.result.rewinds = sum(rep.rewind.rewinds.values())
        self.result.rewound = rep.rewind.reported
        self.result.copies_allowed = rep.rewind.allowed
        self.result.copies = rep.rewind.copies
        for failure in rep.failures():
            self.violation(failure)
        if rep.stored_twice:
            self.violation(
                f"stored_twice={len(rep.stored_twice)} e.g. {rep.stored_twice[:5]} "
                "(clients never resend a key: the system repeated a send)"
            )

    # -- the run ---------------------------------------------------------------------------------
    async def main(self) -> None:
        for nid in self.ids:
            self.start_node(nid)
        observer = self.loop.create_task(self.observer())
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
                await self._judge_failovers(probe_stop)
            self.heal()
            stop.set()
            await asyncio.gather(*workers)
            await self.nemesis.settle()
            await work.drain(self.cfg.heal_seconds + self.cfg.drain_seconds)
            await self.check_replicas()
            self.check_history()
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
