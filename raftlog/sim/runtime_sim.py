"""Deterministic simulation of the asyncio runtime (`GroupDriver`), not just the core.

The production `GroupDriver` runs unchanged on a `VirtualTimeLoop`; only its Protocols are
simulated: storage is a `SimDurableLog` over a `SimDisk` (writes become durable after a random
fsync delay, in order; a crash keeps a random prefix of unsynced writes and may tear the next),
and the network delivers each message after a random delay (so reordered), or drops or
duplicates it, or cuts node pairs. Nodes crash (every group at once, like ``kill -9``) and
restart from their disks. Clients propose unique commands to whichever node leads.

Checked, besides every core invariant the driver itself enforces (a broken one halts a group,
which is a violation here):

- election safety: one leader per (group, term), sampled every tick;
- no proposal future hangs: each resolves (result or retriable error) within a bound;
- every acknowledged command is applied exactly once, and all replicas of a group end with the
  identical applied sequence (after the faults heal);
- liveness: after healing, every group elects a leader and commits a fresh proposal.

Everything derives from the seed, so a failing seed replays exactly.
"""

from __future__ import annotations

import asyncio
import functools
import random
import zlib
from collections.abc import Sequence
from concurrent.futures import Future as ThreadFuture
from dataclasses import dataclass, field
from typing import Any

from raftlog.core import (
    Config,
    ConfState,
    Entry,
    HardState,
    MemoryStorage,
    Message,
    RawNode,
    Role,
    Snapshot,
    SnapshotMeta,
    bootstrap_snapshot,
)
from raftlog.errors import RaftError
from raftlog.runtime.applog import AppendLog
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.group_options import GroupOptions
from raftlog.runtime.host import inline
from raftlog.runtime.statemachine import StateMachine
from raftlog.sim.disk import EntriesRecord, HardStateRecord, Record, SimDisk, SnapshotRecord
from raftlog.sim.vloop import VirtualTimeLoop

TICK = 0.05


class SimDurableLog:
    """`DurableLog` over a `SimDisk`. Submissions complete in order after a random fsync delay;
    the core reads the durable image (a `MemoryStorage` updated at completion)."""

    def __init__(self, disk: SimDisk, mem: MemoryStorage, sim: RuntimeSim) -> None:
        self.disk = disk
        self.mem = mem
        self.sim = sim
        self.dead = False
        self._last_done = 0.0

    # read side
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self.mem.initial_state()

    def first_index(self) -> int:
        return self.mem.first_index()

    def last_index(self) -> int:
        return self.mem.last_index()

    def term(self, index: int) -> int:
        return self.mem.term(index)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        return self.mem.entries(lo, hi, max_bytes)

    def snapshot(self) -> Snapshot:
        return self.mem.snapshot()

    # write side
    def _submit(self, records: list[Record], on_durable: Any) -> ThreadFuture[None]:
        fut: ThreadFuture[None] = ThreadFuture()
        fut.set_running_or_notify_cancel()
        self.disk.write(records)
        loop = self.sim.loop
        # In order, like a WAL: never before an earlier submission.
        at = max(loop.time() + self.sim.rng.uniform(0.0002, 0.004), self._last_done)
        self._last_done = at

        def complete() -> None:
            if self.dead:
                return  # the node crashed first: this write's fate was decided by the crash
            self.disk.sync()
            on_durable()
            fut.set_result(None)

        if self.sim.cfg.unsafe_early_ack:
            on_durable()
            fut.set_result(None)

            def late_sync() -> None:
                if not self.dead:
                    self.disk.sync()

            # Lazily, as a log that fsyncs on a timer does: a power loss of every node at once
            # then loses entries a majority acknowledged.
            loop.call_at(at + self.sim.rng.uniform(0.2, 1.0), late_sync)
            return fut
        loop.call_at(at, complete)
        return fut

    def submit_ready(
        self,
        *,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        hard_state: HardState | None = None,
        sync: bool = True,
    ) -> ThreadFuture[None]:
        records: list[Record] = []
        if snapshot is not None:
            records.append(SnapshotRecord(snapshot, install=True))
        if entries:
            records.append(EntriesRecord(tuple(entries)))
        if hard_state is not None:
            records.append(HardStateRecord(hard_state))

        def durable() -> None:
            if snapshot is not None:
                self.mem.apply_snapshot(snapshot)
            if entries:
                self.mem.append(list(entries))
            if hard_state is not None:
                self.mem.set_hard_state(hard_state)

        return self._submit(records, durable)

    def submit_create_snapshot(
        self, index: int, conf: ConfState, data: bytes
    ) -> tuple[Snapshot, ThreadFuture[None]]:
        snap = Snapshot(SnapshotMeta(index, self.mem.term(index), conf), data)

        def durable() -> None:
            self.mem.create_snapshot(index, conf, data)

        return snap, self._submit([SnapshotRecord(snap, install=False)], durable)

    def compact(self, index: int) -> None:
        self.mem.compact(index)


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
    elections: int = 0
    digest: int = 0
    trace: list[str] = field(default_factory=list)


class _Node:
    def __init__(self, nid: int) -> None:
        self.id = nid
        self.up = False
        self.disks: dict[int, SimDisk] = {}
        self.logs: dict[int, SimDurableLog] = {}
        self.drivers: dict[int, GroupDriver] = {}
        self.incarnation = 0


class RuntimeSim:
    """One seeded run. Use `run_runtime_seed`."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        self.seed = seed
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.loop = VirtualTimeLoop()
        self.result = RuntimeSimResult(seed)
        self.ids = list(range(1, cfg.nodes + 1))
        self.nodes = {i: _Node(i) for i in self.ids}
        self.cut: set[tuple[int, int]] = set()
        self.loss = 0.0
        self.dup = 0.0
        self.acked: dict[int, list[bytes]] = {g: [] for g in self.groups()}
        self.attempted: set[bytes] = set()
        self.leaders: dict[tuple[int, int], int] = {}
        conf = ConfState(tuple(self.ids))
        for n in self.nodes.values():
            for g in self.groups():
                n.disks[g] = SimDisk(bootstrap_snapshot(conf))

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
    def start_node(self, nid: int) -> None:
        n = self.nodes[nid]
        n.up = True
        n.incarnation += 1
        for g in self.groups():
            disk = n.disks[g]
            mem, _ = disk.recover() if disk.crashed else (disk.storage(), None)
            log = SimDurableLog(disk, mem, self)
            raw = RawNode(Config(nid), log, random.Random(self.rng.getrandbits(64)))
            driver = GroupDriver(
                g,
                raw,
                log,
                self.new_state_machine(nid, g),
                send=functools.partial(self.send, nid),
                options=GroupOptions(snapshot_entries=self.cfg.snapshot_entries, keep_entries=5),
                offload=inline,
            )
            n.logs[g] = log
            n.drivers[g] = driver
            driver.start()
        self.trace(f"start n{nid}")

    async def crash_node(self, nid: int) -> None:
        n = self.nodes[nid]
        n.up = False
        for g, driver in n.drivers.items():
            n.logs[g].dead = True
            await driver.stop("crashed")
            n.disks[g].crash(self.rng, 0.3)
            self.state_machine_crashed(nid, g)
        n.drivers = {}
        n.logs = {}
        self.result.crashes += 1
        self.trace(f"crash n{nid}")

    # -- network ---------------------------------------------------------------------------------
    def send(self, frm: int, group: int, msgs: Sequence[Message]) -> None:
        for m in msgs:
            if (frm, m.to) in self.cut or self.rng.random() < self.loss:
                self.result.dropped += 1
                continue
            copies = 2 if self.rng.random() < self.dup else 1
            for _ in range(copies):
                delay = self.rng.uniform(0.0005, 0.01)
                if self.rng.random() < 0.01:
                    delay += self.rng.uniform(0.05, 0.5)  # a straggler
                self.loop.call_later(delay, self.deliver, frm, group, m)

    def deliver(self, frm: int, group: int, m: Message) -> None:
        if (frm, m.to) in self.cut:
            return
        n = self.nodes[m.to]
        driver = n.drivers.get(group)
        if driver is not None and n.up:
            driver.step(m)

    # -- the run ---------------------------------------------------------------------------------
    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            for n in self.nodes.values():
                if not n.up:
                    continue
                for d in n.drivers.values():
                    d.tick()
            self.observe()

    def observe(self) -> None:
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
                and n.up
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
                await asyncio.wait_for(asyncio.shield(fut), 30.0)
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
                    self.start_node(nid)
            elif action < 0.3 and up:
                victim = self.rng.choice(up)
                await self.crash_node(victim)
                await asyncio.sleep(self.rng.uniform(0.1, 3.0))
                self.start_node(victim)
            elif action < 0.5:
                a = self.rng.choice(self.ids)
                others = [i for i in self.ids if i != a]
                for b in others:
                    self.cut.add((a, b))
                    self.cut.add((b, a))
                self.result.partitions += 1
                self.trace(f"isolate n{a}")
            elif action < 0.6:
                a, b = self.rng.sample(self.ids, 2)
                self.cut.add((a, b))
                self.trace(f"cut n{a}->n{b}")
            elif action < 0.75:
                self.cut.clear()
                self.trace("heal links")
            else:
                self.loss = self.rng.choice([0.0, 0.01, 0.05])
                self.dup = self.rng.choice([0.0, 0.01])
                self.trace(f"loss={self.loss} dup={self.dup}")

    async def main(self) -> None:
        for nid in self.ids:
            self.start_node(nid)
        ticker = asyncio.get_running_loop().create_task(self.ticker())
        stop = asyncio.Event()
        clients = [
            asyncio.get_running_loop().create_task(self.workload(g, c, stop))
            for g in self.groups()
            for c in range(self.cfg.clients)
        ]
        try:
            await self.nemesis(self.loop.time() + self.cfg.seconds)
            # Heal: every node up, links whole, no loss.
            self.cut.clear()
            self.loss = self.dup = 0.0
            for nid in self.ids:
                if not self.nodes[nid].up:
                    self.start_node(nid)
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
                for d in n.drivers.values():
                    await d.stop("end of run")

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
                    await asyncio.wait_for(d.propose(cmd), 5.0)
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
    import argparse
    import logging

    ap = argparse.ArgumentParser(prog="python -m raftlog.sim.runtime_sim", description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30.0, help="virtual seconds of chaos")
    ap.add_argument("--plant-early-ack", action="store_true", help="plant the fsync bug")
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)  # halted groups are reported as violations instead
    cfg = RuntimeSimConfig(
        nodes=args.nodes,
        groups=args.groups,
        seconds=args.seconds,
        unsafe_early_ack=args.plant_early_ack,
    )
    return report_seeds("runtime", range(args.seed, args.seed + args.seeds), cfg)


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
