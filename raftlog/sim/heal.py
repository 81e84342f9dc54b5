"""The simulation's heal phase: once the faults end, plan and watch each group's convergence.

`HealPhase.begin` fixes, per group, the backlog its members still need (`liveness.catch_up`)
and from it the run's liveness bound (`liveness.heal_bound_ticks`). `HealPhase.done` is then
polled every tick: a group has converged once it has exactly one leader, a fresh proposal made
through that leader ("heal-gN") was acknowledged and applied, and every member of the leader's
configuration holds the leader's applied index with an identical state-machine digest. A
proposal that was dropped (a leader change, or a proposer removed from the group) is made again
through the current leader.

The phase reads the `Simulation` and proposes through it; it owns only its plan, so a seed's
trace is the same as when this lived inside the simulation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.sim.liveness import CatchUp, MemberLog, catch_up, heal_bound_ticks
from raftlog.sim.network import PERFECT

if TYPE_CHECKING:
    from raftlog.sim.simulation import Simulation

Plan = tuple[int, int, int, bytes]
"""A group's heal proposal: (proposer node, index, term, data)."""


class HealPhase:
    """The heal-phase plan of one `Simulation` (see the module docstring)."""

    def __init__(self, sim: Simulation, *, tick: int, election_tick: int) -> None:
        self.sim = sim
        self.tick = tick
        self.election_tick = election_tick
        self.plan: dict[int, Plan | None] = {}
        self.catch_ups: dict[int, CatchUp] = {}
        self.bound = 0
        """The liveness bound in ticks, fixed by `begin`."""

    def begin(self) -> None:
        """Fix each group's catch-up and the bound (the network is perfect and every node up)."""
        sim = self.sim
        self.plan = dict.fromkeys(sim.groups)
        self.catch_ups = {g: self._catch_up(g) for g in sim.groups}
        self.bound = heal_bound_ticks(
            sim.config.heal_timeouts, self.election_tick, self.catch_ups.values()
        )
        for g, c in self.catch_ups.items():
            sim.log_line(
                f"HEAL g{g}: backlog {c.backlog} at {c.per_round}/round of {c.round_ticks} ticks"
            )

    def _catch_up(self, g: int) -> CatchUp:
        """The replication group ``g`` still needs when the faults heal (`liveness.catch_up`)."""
        sim = self.sim
        members = sim.checker.conf(g).members()
        logs = []
        largest = 0
        for n in members:
            disk = sim.disks[(n, g)]
            largest = max([largest, *(e.size() for e in disk.entries())])
            logs.append(
                MemberLog(
                    disk.last_index(),
                    sim.nodes[(n, g)].raw.raft.log.committed,
                    disk.snapshot().meta.index,
                )
            )
        p = sim.params
        return catch_up(
            logs,
            max_inflight_msgs=p.max_inflight_msgs,
            max_msg_bytes=p.max_msg_bytes,
            max_entry_bytes=largest,
            max_delay=PERFECT.max_delay,
            disk_max=p.disk_max,
            tick=self.tick,
        )

    def done(self) -> bool:
        """Advance the plan; True once every group has converged."""
        done = True
        for g in self.sim.groups:
            if not self._group_live(g):
                done = False
        return done

    def _group_live(self, g: int) -> bool:
        sim = self.sim
        plan = self.plan.get(g)
        if plan is None:
            leaders = sim.leaders(g)
            if len(leaders) != 1 or leaders[0].raw.raft.lead_transferee:
                return False
            sn = leaders[0]
            data = b"heal-g%d" % g
            index = sim.propose(sn, data)
            if index is None:
                return False
            sim.touch(sn)
            self.plan[g] = (sn.id, index, sn.raw.raft.term, data)
            return False
        node, index, term, _ = plan
        if (g, index, term) not in sim.acked_at:
            pend = sim.pending.get((g, node), {})
            proposer = sim.nodes[(node, g)].raw.raft.log
            removed = node not in sim.checker.conf(g).members()  # it will never apply it
            if index not in pend or proposer.term(index) != term or removed:
                pend.pop(index, None)  # the proposal was dropped: retry with the current leader
                self.plan[g] = None
            return False
        leaders = sim.leaders(g)
        if len(leaders) != 1:
            return False
        lead = leaders[0]
        conf = lead.raw.raft.conf
        target = lead.sm.applied
        if target < index or lead.raw.raft.log.committed != target:
            return False
        for n in conf.members():
            sn = sim.nodes[(n, g)]
            if sn.sm.applied != target or sn.sm.digest != lead.sm.digest:
                return False
        return True

    def report(self) -> str:
        """Why the heal phase has not converged: one clause per group."""
        sim = self.sim
        parts = []
        for g in sim.groups:
            leaders = [sn.id for sn in sim.leaders(g)]
            applied = {n: sim.nodes[(n, g)].sm.applied for n in sim.ids}
            parts.append(
                f"g{g}: leaders={leaders} plan={self.plan.get(g)} applied={applied} "
                f"conf={sim.checker.conf(g)}"
            )
        return "; ".join(parts)
