"""The seeded simulation: N nodes x G groups over the real core, with faults, clients and checks.

One run is a pure function of ``(seed, SimConfig)``: every random choice comes from one
``random.Random(seed)`` (each RawNode gets a generator seeded from it), events are ordered by
``(time, sequence number)``, and every dict/set that is iterated is keyed by ints (whose
hashes do not depend on PYTHONHASHSEED) and walked in sorted or insertion order -- so a seed
replays to the identical trace whatever PYTHONHASHSEED is.

A run has two phases:

1. **chaos**, ``SimConfig.steps`` steps. A step is one event: a message delivery, a node's tick
   (all its groups), a disk completion, a client action (proposal, leadership transfer, and with
   four or more nodes membership changes: add learner -> promote, remove) or a fault (crash of a
   node with all its groups, symmetric or one-way partition, heal, new loss/delay rates).
2. **heal**: network perfect, every node up, no more faults. Within the bound of
   `raftlog.sim.liveness` (``heal_timeouts`` election timeouts plus the time the run's own
   windows need to move the backlog) every group must elect a leader, apply a fresh proposal on
   all its voters, and all members of each group must converge to identical applied state
   (``liveness``).

What a client does is `raftlog.sim.clients`' (`Clients`), which fault strikes is
`raftlog.sim.faults`' (`Faults`), the heal phase's plan is `raftlog.sim.heal`'s (`HealPhase`):
each acts through this simulation, which holds the cluster (nodes, disks, network, pending
proposals), orders its events and carries out crashes, restarts and wipes.

After every step the `Checker` has seen everything the step did (see its docstring for the
safety checks); core exceptions (`InvariantViolation` and anything else) are violations too.
A failure is returned as a `Violation` carrying the seed, the check and the last trace lines.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import deque
from collections.abc import Sequence
from enum import IntEnum

from raftlog.core.config import Config
from raftlog.core.storage import bootstrap_snapshot
from raftlog.core.types import (
    ConfState,
    Entry,
    Message,
    MsgType,
    Ready,
    Role,
    Snapshot,
)
from raftlog.errors import RaftError
from raftlog.sim.checker import Ack, Checker
from raftlog.sim.clients import Clients
from raftlog.sim.disk import SimDisk
from raftlog.sim.faults import Faults
from raftlog.sim.heal import HealPhase
from raftlog.sim.liveness import CatchUp
from raftlog.sim.network import PERFECT, SendOutcome, SimNetwork
from raftlog.sim.node import SimNode
from raftlog.sim.outcome import SimConfig, draw_params
from raftlog.sim.rollback import Rollbacks

TICK = 10
"""Simulated time units per tick (network delays and disk latencies are in the same units)."""
ELECTION_TICK = 10
"""Every simulated node's election timeout, in ticks (randomized in ``[10, 20)`` by the core)."""


class _Ev(IntEnum):
    TICK = 0
    DISK = 1
    CLIENT = 2
    FAULT = 3
    RESTART = 4


class Simulation:
    """One seeded run. Use `run_seed` unless you need to poke at the state in a test."""

    def __init__(self, seed: int, config: SimConfig) -> None:
        config.validate()
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self.step_no = 0
        self.healing = False
        self.ids = list(range(1, config.nodes + 1))
        self.groups = list(range(1, config.groups + 1))
        self.params = draw_params(self.rng, small_windows=config.small_windows)
        self.net = SimNetwork(self.rng, self.params.faults)
        self._events: list[tuple[int, int, int, int, int, int]] = []
        self._seq = 0
        self.up = dict.fromkeys(self.ids, True)
        self.generation = {(n, g): 0 for n in self.ids for g in self.groups}
        # (node, group) pairs whose disk was wiped and that have not caught up since.
        self.wiped: set[tuple[int, int]] = set()
        self.rollbacks = Rollbacks()
        # With four or more nodes a group may be founded by three of them; the others start
        # with empty disks and join (as learners, through a snapshot) when a client adds them.
        self.founding: dict[int, ConfState] = {}
        for g in self.groups:
            voters = self.ids
            if len(self.ids) >= 4 and self.rng.random() < 0.5:
                voters = sorted(self.rng.sample(self.ids, 3))
            self.founding[g] = ConfState(tuple(voters))
        self.disks = {
            (n, g): SimDisk(
                bootstrap_snapshot(self.founding[g]) if n in self.founding[g].voters else None
            )
            for n in self.ids
            for g in self.groups
        }
        self.nodes: dict[tuple[int, int], SimNode] = {}
        self.checker = Checker(
            dict(self.founding),
            lambda n, g, i, t: self.disks[(n, g)].holds(i, t),
            lambda n, g: self.disks[(n, g)].snapshot().meta.index,
        )
        # (group, node) -> {index: (term, data)} of proposals awaiting their proposer's apply.
        self.pending: dict[tuple[int, int], dict[int, tuple[int, bytes]]] = {}
        self.acked_at: set[tuple[int, int, int]] = set()
        self.proposals = 0
        counters = (
            "acked crashes rollbacks torn conf_changes transfers snapshots_installed partitions"
        )
        self.stats: dict[str, int] = dict.fromkeys(counters.split(), 0)
        self.stats |= {"heal_ticks": -1, "heal_bound": -1}
        self.trace: deque[str] = deque(maxlen=config.trace_lines)
        self._trace_hash = hashlib.blake2b(digest_size=16)
        self.heal_phase = HealPhase(self, tick=TICK, election_tick=ELECTION_TICK)
        self.clients = Clients(self)
        self.faults = Faults(self)
        self.catch_ups: dict[int, CatchUp] = {}
        self.heal_bound = 0
        """The liveness bound in ticks, fixed when the faults heal (`heal`)."""
        for n in self.ids:
            for g in self.groups:
                self.nodes[(n, g)] = self._new_node(n, g)
            self._push(self.rng.randint(1, TICK), _Ev.TICK, n)
        self._push(self.params.client_every, _Ev.CLIENT)
        self._push(self.params.fault_every, _Ev.FAULT)

    # -- setup ------------------------------------------------------------------------------------
    def _raft_config(self, node: int, rejoin: bool = False) -> Config:
        p = self.params
        return Config(
            node,
            rejoin=rejoin,
            election_tick=ELECTION_TICK,
            heartbeat_tick=p.heartbeat_tick,
            max_msg_bytes=p.max_msg_bytes,
            max_inflight_msgs=p.max_inflight_msgs,
            max_uncommitted_bytes=p.max_uncommitted_bytes,
            unsafe=self.config.unsafe,
        )

    def _new_node(self, node: int, group: int) -> SimNode:
        key = (node, group)
        self.generation[key] += 1
        return SimNode(
            self,
            self._raft_config(node, rejoin=key in self.wiped),
            group,
            self.disks[key],
            rng=random.Random(self.rng.getrandbits(64)),
            generation=self.generation[key],
            snapshot_every=self.params.snapshot_every,
            keep_after_compact=self.params.keep_after_compact,
        )

    def _push(self, at: int, kind: _Ev, a: int = 0, b: int = 0, c: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, int(kind), a, b, c))

    def log_line(self, line: str) -> None:
        text = f"{self.step_no}@{self.now} {line}"
        self.trace.append(text)
        self._trace_hash.update(text.encode())

    # -- NodeHost ---------------------------------------------------------------------------------
    def send(self, sn: SimNode, msgs: Sequence[Message]) -> None:
        """Put ``msgs`` on the network, telling the sender about links known to be down."""
        for m in msgs:
            if self.up.get(m.to, False):
                outcome = self.net.send(self.now, sn.group, m)
            else:
                outcome = SendOutcome.CUT if m.to in self.up else SendOutcome.LOST
            if outcome is SendOutcome.CUT or (
                outcome is SendOutcome.LOST and not self.config.silent_loss
            ):
                self._link_broken(sn.id, m.to)
                if m.type is MsgType.SNAP:
                    sn.raw.report_snapshot(m.to, False)

    def _link_broken(self, a: int, b: int) -> None:
        """The connection between ``a`` and ``b`` failed: both ends tell all their groups
        (the leader's progress bookkeeping; a follower led by the other end campaigns within a
        few ticks, `raftlog.core.election.Elections.report_peer_down`).

        Reports send no messages and make no Ready by themselves (a campaign starts at a
        later tick), so nothing needs pumping afterwards.
        """
        for x, y in ((a, b), (b, a)):
            if self.up.get(x, False):
                for g in self.groups:
                    raw = self.nodes[(x, g)].raw
                    raw.report_unreachable(y)
                    raw.report_peer_down(y)

    def schedule_completion(self, sn: SimNode) -> None:
        """The Ready's fsync completes after a random disk latency."""
        delay = self.rng.randint(1, self.params.disk_max)
        self._push(self.now + delay, _Ev.DISK, sn.id, sn.group, sn.generation)

    def on_ready(self, sn: SimNode, rd: Ready) -> None:
        """Register the Ready's entries with the log-matching check; trace role changes."""
        if rd.entries:
            first = rd.entries[0].index
            self.checker.on_entries(
                sn.group, sn.id, rd.entries, sn.raw.raft.log.term(first - 1) if first > 1 else 0
            )
        if rd.soft_state is not None and rd.soft_state.role is Role.LEADER:
            self.log_line(f"g{sn.group} n{sn.id} becomes leader term {sn.raw.raft.term}")

    def on_synced(self, sn: SimNode, lost: bool) -> None:
        """A sync that removed durable entries may have broken durability: re-check."""
        if lost:
            self.checker.check_durability(sn.group)

    def on_restore(self, sn: SimNode, snap: Snapshot) -> None:
        self.stats["snapshots_installed"] += 1
        self.checker.on_restore(sn.group, sn.id, snap.meta.index, snap.meta.term, sn.sm.digest)
        pend = self.pending.get((sn.group, sn.id))
        if pend:
            for index in [i for i in sorted(pend) if i <= snap.meta.index]:
                del pend[index]  # outcome unknown to the client: never acknowledged

    def on_apply(self, sn: SimNode, e: Entry, digest: bytes) -> None:
        g = sn.group
        self.checker.on_apply(g, sn.id, e, digest)
        pend = self.pending.get((g, sn.id))
        if not pend:
            return
        proposal = pend.pop(e.index, None)
        if proposal is not None and proposal == (e.term, e.data):
            self.stats["acked"] += 1
            self.acked_at.add((g, e.index, e.term))
            self.checker.on_ack(Ack(g, e.index, e.term, e.data, self.checker.max_term[g]))

    # -- driving ----------------------------------------------------------------------------------
    def touch(self, sn: SimNode) -> None:
        sn.pump()
        self.checker.observe(sn.group, sn.id, sn.raw.raft)

    def step(self) -> None:
        """Process the next event (a message or a scheduled event), whichever is due first."""
        self.step_no += 1
        net_at = self.net.peek_time()
        ev_at = self._events[0][0]
        if net_at is not None and net_at <= ev_at:
            self.now = max(self.now, net_at)
            self._deliver()
            return
        at, _, kind, a, b, c = heapq.heappop(self._events)
        self.now = max(self.now, at)
        if kind == _Ev.TICK:
            self._tick(a)
        elif kind == _Ev.DISK:
            sn = self.nodes.get((a, b))
            if sn is not None and sn.generation == c and self.up[a]:
                self.log_line(f"g{b} n{a} fsync done")
                sn.complete()
                self.checker.observe(b, a, sn.raw.raft)
            else:
                self.log_line(f"g{b} n{a} fsync of a dead incarnation ignored")
        elif kind == _Ev.CLIENT:
            self.clients.act()
            self._push(self.now + self.rng.randint(1, 2 * self.params.client_every), _Ev.CLIENT)
        elif kind == _Ev.FAULT:
            self.faults.strike()
            self._push(self.now + self.rng.randint(1, 2 * self.params.fault_every), _Ev.FAULT)
        elif kind == _Ev.RESTART and not self.up[a]:
            self._restart(a)

    def _deliver(self) -> None:
        env, ok = self.net.pop()
        m = env.msg
        g = env.group
        sender = self.nodes.get((m.frm, g)) if self.up[m.frm] else None
        desc = (
            f"g{g} {m.type.name} {m.frm}>{m.to} t{m.term} i{m.index} lt{m.log_term} "
            f"n{len(m.entries)} c{m.commit}{' rej' if m.reject else ''}"
        )
        if not ok or not self.up[m.to]:
            self.log_line(f"{desc} LOST ({'cut' if not ok else 'down'})")
            self._link_broken(m.frm, m.to)  # the connection broke with the message in flight
            if sender is not None and m.type is MsgType.SNAP:
                sender.raw.report_snapshot(m.to, False)
            return
        self.log_line(desc)
        dest = self.nodes[(m.to, g)]
        dest.raw.step(m)
        self.touch(dest)
        if sender is not None and m.type is MsgType.SNAP:
            sender.raw.report_snapshot(m.to, True)

    def _tick(self, node: int) -> None:
        self._push(self.now + TICK, _Ev.TICK, node)
        if not self.up[node]:
            return
        self.log_line(f"tick n{node}")
        for g in self.groups:
            sn = self.nodes[(node, g)]
            sn.raw.tick()
            self.touch(sn)

    # -- proposals and wiping (what the clients, `raftlog.sim.clients`, and the heal phase use) ---
    def leaders(self, g: int) -> list[SimNode]:
        return [
            sn
            for n in self.ids
            if self.up[n] and (sn := self.nodes[(n, g)]).raw.raft.role is Role.LEADER
        ]

    def propose(self, sn: SimNode, data: bytes | None = None) -> int | None:
        if data is None:
            self.proposals += 1
            data = b"g%d.p%d" % (sn.group, self.proposals)
        try:
            index = sn.raw.propose(data)
        except RaftError as exc:
            self.log_line(f"client g{sn.group} propose {data!r} to n{sn.id}: {exc.code}")
            return None
        term = sn.raw.raft.term
        self.pending.setdefault((sn.group, sn.id), {})[index] = (term, data)
        self.log_line(f"client g{sn.group} propose {data!r} to n{sn.id} -> {index}/{term}")
        return index

    def wipe(self, node: int, g: int) -> None:
        """Give a non-member a fresh, empty disk and state (it is about to be re-added).

        Unsafe with this core (see `SimConfig.wipe_rejoining`): only for demonstrating that.
        """
        key = (node, g)
        self.disks[key] = SimDisk()
        if self.config.rejoin_wiped:
            self.wiped.add(key)
        self.pending.pop((g, node), None)
        self.checker.forget(g, node)
        reset = self.net.drop(g, node)  # the old incarnation's connection dies with it
        if self.up[node]:
            self.nodes[key] = self._new_node(node, g)
        else:
            self.generation[key] += 1
        self.log_line(f"wipe g{g} n{node} ({reset} messages in flight dropped)")

    # -- crash and restart (a crash is one of `raftlog.sim.faults`' picks) ------------------------
    def crash(self, node: int) -> None:
        self.up[node] = False
        self.stats["crashes"] += 1
        parts = []
        for g in self.groups:
            out = self.disks[(node, g)].crash(self.rng, self.params.torn)
            self.stats["torn"] += int(out.torn)
            parts.append(f"g{g}:kept{out.kept}/lost{out.lost}{'/torn' if out.torn else ''}")
            self.pending.pop((g, node), None)
            self.checker.forget(g, node)
        for peer in self.ids:
            if peer != node:
                self._link_broken(node, peer)
        self.log_line(f"CRASH n{node} {' '.join(parts)}")
        if self.config.rollbacks:
            note = self.rollbacks.on_crash(
                self.rng, node, self.disks, self.groups, self.checker.conf
            )
            if note is not None:
                self.stats["rollbacks"] += 1
                self.log_line(note)
        self._push(self.now + self.rng.randint(TICK, 80 * TICK), _Ev.RESTART, node)

    def _restart(self, node: int) -> None:
        self.up[node] = True
        parts = []
        for g in self.groups:
            disk = self.disks[(node, g)]
            if disk.crashed:
                _, rec = disk.recover()
                parts.append(f"g{g}:replayed{rec.replayed}/dropped{rec.dropped}")
            old = self.nodes.get((node, g))
            if old is not None and not old.raw.raft.rejoining:
                self.wiped.discard((node, g))  # it caught up before it crashed: a voter again
            sn = self.nodes[(node, g)] = self._new_node(node, g)
            hs = sn.raw.raft
            parts.append(f"(t{hs.term} last{hs.log.last_index()} c{hs.log.committed})")
        self.log_line(f"RESTART n{node} {' '.join(parts)}")
        for g in self.groups:
            self.touch(self.nodes[(node, g)])

    # -- heal phase and liveness ------------------------------------------------------------------
    def heal(self) -> None:
        """End of chaos: perfect network, every node up, no more client traffic or faults."""
        self.healing = True
        self.net.heal()
        self.net.set_faults(PERFECT)
        self.log_line("HEAL: network perfect, all nodes up")
        for n in self.ids:
            if not self.up[n]:
                self._restart(n)
        self.heal_phase.begin()
        self.catch_ups = self.heal_phase.catch_ups
        self.heal_bound = self.heal_phase.bound

    def liveness_done(self) -> bool:
        """Advance the heal-phase plan; True once every group has converged."""
        return self.heal_phase.done()

    def liveness_report(self) -> str:
        """Why the heal phase has not converged: one clause per group."""
        return self.heal_phase.report()

    def state_digest(self) -> str:
        """A hash of every node's Raft and state machine state (for replay comparisons)."""
        h = hashlib.blake2b(digest_size=16)
        for n in self.ids:
            for g in self.groups:
                sn = self.nodes[(n, g)]
                r = sn.raw.raft
                h.update(
                    f"{n}/{g}:{int(self.up[n])}:{r.term}:{r.vote}:{int(r.role)}:{r.log.committed}:"
                    f"{sn.sm.applied}".encode()
                )
                h.update(sn.sm.digest)
        return h.hexdigest()

    def trace_digest(self) -> str:
        return self._trace_hash.hexdigest()
