"""Deterministic simulation of the asyncio runtime: real `MultiRaft` hosts, not just the core.

Each node is the production `MultiRaft` (its tick loop, outbox, liveness, and a `GroupDriver`
per group) running on one `VirtualTimeLoop` with its I/O replaced by the in-memory twins
(`raftlog.runtime.host`): a `MemoryTransport` per node on one seeded `MemoryNetwork` (TCP-like
links: in order, at most once, seeded delays and stragglers, frames lost at a chosen rate,
partitions that reset links and heal, paused nodes), `MemoryDisks` (writes durable in order
after a seeded fsync delay; a power loss keeps a random prefix of what was not synced and may
tear the next record), a `LoopClock` and the inline offload. Nodes lose power (every group at
once, like ``kill -9`` of the machine: the host is dropped, its disk keeps what survived, its
peers see the connections reset or only silence) and restart from their disks. Clients propose
unique commands to whichever node leads.

Checked, besides every core invariant the driver itself enforces (a broken one halts a group,
which is a violation here):

- election safety: one leader per (group, term), sampled every tick;
- no proposal future hangs: each resolves (result or retriable error) within a bound;
- every acknowledged command is applied exactly once, and all replicas of a group end with the
  identical applied sequence (after the faults heal);
- liveness: after healing, every group elects a leader and commits a fresh proposal;
- no frame handler raised (the network counts them).

Everything derives from the seed, so a failing seed replays exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

from raftlog.core import Role
from raftlog.errors import RaftError
from raftlog.runtime.applog import AppendLog
from raftlog.runtime.config import RuntimeConfig
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.group_options import GroupOptions
from raftlog.runtime.host import LoopClock, inline
from raftlog.runtime.multiraft import MultiRaft
from raftlog.runtime.statemachine import StateMachine
from raftlog.sim.vloop import VirtualTimeLoop
from raftlog.storage.memory import MemoryDiskOptions, MemoryDisks
from raftlog.transport.address import Address
from raftlog.transport.memory import MemoryNetwork, MemoryTransport

TICK = 0.05
EPOCH_MS = 1_700_000_000_000
"""The wall clock of every simulated node at virtual time 0."""
LIVENESS_TICKS = 10
"""`RuntimeConfig.liveness_ticks` of every simulated node."""


@dataclass(frozen=True, slots=True)
class RuntimeSimConfig:
    nodes: int = 3
    groups: int = 2
    seconds: float = 30.0
    """Virtual seconds of chaos before healing."""
    clients: int = 3
    """Concurrent proposers per group."""
    heal_seconds: float = 20.0
    snapshot_entries: int = 40
    unsafe_early_ack: bool = False
    """Test-only planted bug: storage reports writes durable before they are synced, and syncs
    them only a fraction of a second later (a log that fsyncs on a timer). A crash of one node
    then loses entries it acknowledged, which the recovery rule makes up for from its peers; a
    power loss of every node at once loses committed entries, which the checks must notice."""


@dataclass(slots=True)
class RuntimeSimResult:
    seed: int
    violations: list[str] = field(default_factory=list)
    acked: int = 0
    attempted: int = 0
    crashes: int = 0
    partitions: int = 0
    dropped: int = 0
    """Frames lost on their way or in flight when their link broke."""
    elections: int = 0
    digest: int = 0
    trace: list[str] = field(default_factory=list)


_NO_DRIVERS: Mapping[int, GroupDriver] = {}


class _Node:
    """One simulated machine: its running host (None while it is down)."""

    def __init__(self, nid: int) -> None:
        self.id = nid
        self.host: MultiRaft | None = None
        self.incarnation = 0

    @property
    def up(self) -> bool:
        return self.host is not None

    @property
    def drivers(self) -> Mapping[int, GroupDriver]:
        """The groups open on the running host (none while down)."""
        return self.host.groups if self.host is not None else _NO_DRIVERS

    @property
    def directory(self) -> str:
        return f"n{self.id}/d0"


class RuntimeSim:
    """One seeded run. Use `run_runtime_seed`."""

    quiesce = False
    """`RuntimeConfig.quiesce` of the hosts (the quiescence simulation turns it on)."""
    host_class: ClassVar[type[MultiRaft]] = MultiRaft
    """The host of every node incarnation (a simulation with a planted bug names a subclass)."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        self.seed = seed
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.loop = VirtualTimeLoop()
        self.result = RuntimeSimResult(seed)
        self.ids = list(range(1, cfg.nodes + 1))
        self.nodes = {i: _Node(i) for i in self.ids}
        self.net = MemoryNetwork(self.loop, self.rng)
        self.disks = MemoryDisks(
            self.loop, self.rng, MemoryDiskOptions(unsafe_early_ack=cfg.unsafe_early_ack)
        )
        self.hosts: list[MultiRaft] = []
        """Every host started, in order (crashed ones included)."""
        self.acked: dict[int, list[bytes]] = {g: [] for g in self.groups()}
        self.attempted: set[bytes] = set()
        self.leaders: dict[tuple[int, int], int] = {}

    def groups(self) -> range:
        return range(1, self.cfg.groups + 1)

    def trace(self, text: str) -> None:
        self.result.trace.append(f"{self.loop.time():9.3f} {text}")
        if len(self.result.trace) > 60:
            del self.result.trace[:20]

    def violation(self, text: str) -> None:
        self.result.violations.append(text)
        self.trace(f"VIOLATION {text}")

    # -- hooks for other state machines and workloads (the queue's simulation overrides them) --
    def new_state_machine(self, nid: int, group: int) -> StateMachine:
        """The state machine for ``group`` on ``nid`` (at every start)."""
        del nid, group
        return AppendLog()

    def state_machine_crashed(self, nid: int, group: int) -> None:
        """``nid`` lost power: drop whatever its state machine had not made durable."""
        del nid, group

    async def workload(self, group: int, cid: int, stop: asyncio.Event) -> None:
        """One client's traffic until ``stop``."""
        await self.client(group, cid, stop)

    async def final_checks(self) -> None:
        """After healing: liveness and end-state checks."""
        await self.check_liveness()

    # -- nodes -----------------------------------------------------------------------------------
    async def start_node(self, nid: int) -> None:
        """Start ``nid``'s host on its disk (what its power losses left) and open its groups."""
        n = self.nodes[nid]
        n.incarnation += 1
        addresses = {i: Address(f"n{i}", 7000) for i in self.ids}
        cfg = RuntimeConfig(
            node_id=nid,
            listen=addresses[nid],
            peers=addresses,
            secret=b"simulated",
            data_dirs=(n.directory,),
            tick_interval=TICK,
            quiesce=self.quiesce,
            liveness_ticks=LIVENESS_TICKS,
            seed=self.rng.getrandbits(64),
            group_options=GroupOptions(snapshot_entries=self.cfg.snapshot_entries, keep_entries=5),
        )
        host = self.host_class(
            cfg,
            transport=self.net.transport(nid, self.ids),
            disks=self.disks,
            clock=LoopClock(self.loop, EPOCH_MS),
            offload=inline,
        )
        self.hosts.append(host)
        await host.start()
        for g in self.groups():
            await host.open_group(g, self.new_state_machine(nid, g), voters=self.ids)
        n.host = host
        self.trace(f"start n{nid}")

    async def crash_node(self, nid: int) -> None:
        """``nid`` loses power: its disk keeps a random prefix of what it had not synced, its
        peers see the connections reset or (half the time) only silence, its host is dropped."""
        n = self.nodes[nid]
        host = n.host
        if host is None:
            return
        n.host = None
        loss = self.disks[n.directory].power_loss()
        transport = host.transport
        assert isinstance(transport, MemoryTransport)
        transport.crash(notify=self.rng.random() < 0.5)
        for g in self.groups():
            self.state_machine_crashed(nid, g)
        await host.close()
        self.result.crashes += 1
        self.trace(f"crash n{nid} (kept {loss.kept} of {loss.kept + loss.lost} unsynced)")

    # -- the run ---------------------------------------------------------------------------------
    async def ticker(self) -> None:
        """The simulation's own clock: checks after every tick (the hosts tick themselves)."""
        while True:
            await asyncio.sleep(TICK)
            self.observe()

    def observe(self) -> None:
        if self.net.stats.handler_errors:
            self.violation(f"{self.net.stats.handler_errors} frame handlers raised")
            self.net.stats.handler_errors = 0  # report once
        for n in self.nodes.values():
            for g, d in n.drivers.items():
                if d.stopped is not None and n.up:
                    self.violation(f"group {g} on n{n.id} halted: {d.stopped!r}")
                    d.stopped = None  # report once
                r = d.raw.raft
                if r.lost_acknowledged:
                    # No fault here wipes or rolls back a disk: only a storage that lies does.
                    self.violation(f"group {g} on n{n.id} lost entries it had acknowledged")
                    r.lost_acknowledged = 0  # report once
                if r.role is Role.LEADER:
                    key = (g, r.term)
                    other = self.leaders.setdefault(key, n.id)
                    if other != n.id:
                        self.violation(f"two leaders in group {g} term {r.term}: n{other} n{n.id}")

    def leader_of(self, group: int) -> GroupDriver | None:
        best: GroupDriver | None = None
        for n in self.nodes.values():
            d = n.drivers.get(group)
            if (
                d is not None
                and d.raw.raft.role is Role.LEADER
                and (best is None or d.raw.raft.term > best.raw.raft.term)
            ):
                best = d
        return best

    async def client(self, group: int, cid: int, stop: asyncio.Event) -> None:
        seq = 0
        while not stop.is_set():
            seq += 1
            cmd = b"g%d-c%d-%d" % (group, cid, seq)
            d = self.leader_of(group)
            if d is None:
                await asyncio.sleep(0.05)
                continue
            self.attempted.add(cmd)
            try:
                fut = d.propose(cmd)
            except RaftError:
                await asyncio.sleep(0.02)
                continue
            try:
                async with asyncio.timeout(30.0):
                    await asyncio.shield(fut)
            except TimeoutError:
                self.violation(f"proposal {cmd!r} neither applied nor failed within 30 s")
                continue
            except RaftError:
                continue
            self.acked[group].append(cmd)
            self.result.acked += 1
            await asyncio.sleep(self.rng.uniform(0.0, 0.01))

    async def nemesis(self, until: float) -> None:
        loop = self.loop
        net = self.net
        while loop.time() < until:
            await asyncio.sleep(self.rng.uniform(0.2, 2.0))
            action = self.rng.random()
            up = [i for i in self.ids if self.nodes[i].up]
            if action < 0.05 and len(up) == len(self.ids):
                # Coordinated power loss: every node at once, then all restart.
                for nid in self.ids:
                    await self.crash_node(nid)
                await asyncio.sleep(self.rng.uniform(0.1, 1.0))
                for nid in self.ids:
                    await self.start_node(nid)
            elif action < 0.3 and up:
                victim = self.rng.choice(up)
                await self.crash_node(victim)
                await asyncio.sleep(self.rng.uniform(0.1, 3.0))
                await self.start_node(victim)
            elif action < 0.5:
                a = self.rng.choice(self.ids)
                net.isolate(a, [i for i in self.ids if i != a])
                self.result.partitions += 1
                self.trace(f"isolate n{a}")
            elif action < 0.6:
                a, b = self.rng.sample(self.ids, 2)
                net.cut(a, b)
                self.trace(f"cut n{a}-n{b}")
            elif action < 0.66:
                # A stopped process (SIGSTOP, a long GC pause): its links stay up, silent.
                a = self.rng.choice(self.ids)
                net.pause(a)
                self.trace(f"pause n{a}")
                await asyncio.sleep(self.rng.uniform(0.1, 2.0))
                net.resume(a)
                self.trace(f"resume n{a}")
            elif action < 0.8:
                net.heal_all()
                self.trace("heal links")
            else:
                loss = self.rng.choice([0.0, 0.01, 0.05])
                net.faults = replace(net.faults, loss=loss)
                self.trace(f"loss={loss}")

    async def main(self) -> None:
        for nid in self.ids:
            await self.start_node(nid)
        loop = asyncio.get_running_loop()
        ticker = loop.create_task(self.ticker())
        stop = asyncio.Event()
        clients = [
            loop.create_task(self.workload(g, c, stop))
            for g in self.groups()
            for c in range(self.cfg.clients)
        ]
        try:
            await self.nemesis(self.loop.time() + self.cfg.seconds)
            # Heal: every node up, links whole, no loss.
            self.net.heal_all()
            self.net.faults = replace(self.net.faults, loss=0.0)
            for nid in self.ids:
                if not self.nodes[nid].up:
                    await self.start_node(nid)
            self.trace("healed")
            stop.set()
            await asyncio.gather(*clients)
            await self.final_checks()
        finally:
            ticker.cancel()
            for t in clients:
                t.cancel()
            await asyncio.gather(ticker, *clients, return_exceptions=True)
            for n in self.nodes.values():
                if n.host is not None:
                    await n.host.close()
            st = self.net.stats
            self.result.dropped = st.lost + st.dropped

    async def check_liveness(self) -> None:
        deadline = self.loop.time() + self.cfg.heal_seconds
        for g in self.groups():
            cmd = b"final-%d" % g
            self.attempted.add(cmd)
            done = False
            while self.loop.time() < deadline and not done:
                d = self.leader_of(g)
                if d is None:
                    await asyncio.sleep(0.05)
                    continue
                try:
                    async with asyncio.timeout(5.0):
                        await d.propose(cmd)
                    self.acked[g].append(cmd)
                    done = True
                except (RaftError, TimeoutError):
                    await asyncio.sleep(0.05)
                    cmd += b"'"
                    self.attempted.add(cmd)
            if not done:
                self.violation(f"group {g}: no commit within {self.cfg.heal_seconds} s of healing")
        # Let every replica apply everything, then compare.
        for _ in range(int(self.cfg.heal_seconds / 0.05)):
            if self.converged():
                break
            await asyncio.sleep(0.05)
        digest = 0
        for g in self.groups():
            seqs = {nid: self._sm(nid, g).commands for nid in self.ids}
            first = seqs[self.ids[0]]
            for nid, s in seqs.items():
                if s != first:
                    self.violation(f"group {g}: n{nid} applied a different sequence")
            if len(first) != len(set(first)):
                self.violation(f"group {g}: a command was applied twice")
            lost = set(self.acked[g]) - set(first)
            if lost:
                self.violation(f"group {g}: {len(lost)} acknowledged commands lost")
            if set(first) - self.attempted:
                self.violation(f"group {g}: applied a command nobody proposed")
            for c in first:
                digest = zlib.crc32(c, digest)
        self.result.digest = digest
        self.result.attempted = len(self.attempted)

    def _sm(self, nid: int, group: int) -> AppendLog:
        sm = self.nodes[nid].drivers[group].sm
        assert isinstance(sm, AppendLog)
        return sm

    def converged(self) -> bool:
        for g in self.groups():
            seqs = [self._sm(nid, g).commands for nid in self.ids]
            if any(s != seqs[0] for s in seqs):
                return False
        return True


def run_runtime_seed(
    seed: int,
    cfg: RuntimeSimConfig | None = None,
    sim_class: type[RuntimeSim] | None = None,
) -> RuntimeSimResult:
    """Run one seed to completion on a fresh virtual-time loop (``sim_class``: a `RuntimeSim`
    subclass with another state machine and workload)."""
    sim = (sim_class or RuntimeSim)(seed, cfg or RuntimeSimConfig())
    try:
        sim.loop.run_until_complete(sim.main())
    finally:
        sim.loop.close()
    return sim.result


def main(argv: list[str] | None = None) -> int:
    """``python -m raftlog.sim.runtime_sim --seeds N [--seed S] [--nodes 3|5] [--seconds T]``."""
    import logging

    ap = seeds_parser("python -m raftlog.sim.runtime_sim", __doc__, groups=2)
    ap.add_argument("--plant-early-ack", action="store_true", help="plant the fsync bug")
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)  # halted groups are reported as violations instead
    cfg = replace(seeds_config(args), unsafe_early_ack=args.plant_early_ack)
    return report_seeds("runtime", seeds_of(args), cfg)


def seeds_parser(prog: str, description: str | None, *, groups: int) -> argparse.ArgumentParser:
    """The command line of a runtime simulation, with the arguments every one takes: ``--seeds``,
    ``--seed``, ``--nodes``, ``--groups`` (default ``groups``) and ``--seconds``."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--groups", type=int, default=groups)
    ap.add_argument("--seconds", type=float, default=30.0, help="virtual seconds of chaos")
    return ap


def seeds_config(args: argparse.Namespace) -> RuntimeSimConfig:
    """The run's shape from `seeds_parser`'s ``--nodes``, ``--groups`` and ``--seconds``."""
    return RuntimeSimConfig(nodes=args.nodes, groups=args.groups, seconds=args.seconds)


def seeds_of(args: argparse.Namespace) -> range:
    """The seeds `seeds_parser`'s ``--seed`` and ``--seeds`` name."""
    return range(args.seed, args.seed + args.seeds)


def report_seeds(
    label: str, seeds: range, cfg: RuntimeSimConfig, sim_class: type[RuntimeSim] | None = None
) -> int:
    """Run ``seeds``, print each failing one with its trace and a summary line
    ``<label> seeds=… nodes=… acked=… violations=…``; exit status 1 on any violation."""
    bad = 0
    acked = 0
    for seed in seeds:
        r = run_runtime_seed(seed, cfg, sim_class)
        acked += r.acked
        if r.violations:
            bad += 1
            print(f"seed {seed}: " + "; ".join(r.violations[:3]))
            print("\n".join("    " + line for line in r.trace[-20:]))
    print(f"{label} seeds={len(seeds)} nodes={cfg.nodes} acked={acked} violations={bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
