"""The core simulation's clients: what a client asks of a group's leader, one action at a time.

`Clients.act` picks a random group and, if it has a leader, one action through it: most often a
proposal (`Simulation.propose`, which remembers it until its proposer applies it), sometimes a
leadership transfer to another voter and, with four or more nodes, a membership change (add a
learner, promote it, remove a voter or learner; with ``SimConfig.wipe_rejoining`` a node re-added
gets an empty disk first, `Simulation.wipe`).

Like `raftlog.sim.heal.HealPhase`, the clients read the `Simulation` and act through it, drawing
from its generator in the same order as when this lived inside it, so a seed's trace is unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.core.types import ConfChange, ConfChangeKind
from raftlog.errors import RaftError

if TYPE_CHECKING:
    from raftlog.sim.node import SimNode
    from raftlog.sim.simulation import Simulation


class Clients:
    """The clients of one `Simulation` (see the module docstring)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def act(self) -> None:
        """One client action on a random group's leader (none while the run heals)."""
        sim = self.sim
        if sim.healing:
            return
        r = sim.rng
        g = r.choice(sim.groups)
        leaders = sim.leaders(g)
        target = r.choice(leaders) if leaders else None
        roll = r.random()
        if target is None:
            sim.log_line(f"client g{g}: no leader")
            return
        if roll < 0.04:
            self._transfer(target)
        elif roll < 0.12 and sim.config.nodes >= 4:
            self._conf_change(target)
        else:
            sim.propose(target)
        sim.touch(target)

    def _transfer(self, sn: SimNode) -> None:
        sim = self.sim
        voters = [v for v in sn.raw.raft.conf.voters if v != sn.id]
        if not voters:
            return
        to = sim.rng.choice(voters)
        sim.stats["transfers"] += 1
        try:
            sn.raw.transfer_leader(to)
            sim.log_line(f"client g{sn.group} transfer n{sn.id} -> n{to}")
        except RaftError as exc:
            sim.log_line(f"client g{sn.group} transfer n{sn.id} -> n{to}: {exc.code}")

    def _conf_change(self, sn: SimNode) -> None:
        sim = self.sim
        r = sim.rng
        raft = sn.raw.raft
        conf = raft.conf
        g = sn.group
        outsiders = [n for n in sim.ids if n not in conf.members()]
        options: list[ConfChange] = []
        if len(conf.voters) > 3:
            options.extend(ConfChange(ConfChangeKind.REMOVE, v) for v in conf.voters)
        options.extend(ConfChange(ConfChangeKind.PROMOTE, n) for n in conf.learners)
        options.extend(ConfChange(ConfChangeKind.REMOVE, n) for n in conf.learners)
        if raft.pending_conf_index <= raft.log.applied:
            options.extend(ConfChange(ConfChangeKind.ADD_LEARNER, n) for n in outsiders)
        if not options:
            return
        cc = r.choice(options)
        if cc.kind is ConfChangeKind.ADD_LEARNER and sim.config.wipe_rejoining:
            sim.wipe(cc.node, g)
        try:
            index = sn.raw.propose_conf_change(cc)
        except RaftError as exc:
            sim.log_line(f"client g{g} conf {cc.kind.name} n{cc.node} via n{sn.id}: {exc.code}")
            return
        sim.stats["conf_changes"] += 1
        sim.log_line(f"client g{g} conf {cc.kind.name} n{cc.node} via n{sn.id} -> {index}")
