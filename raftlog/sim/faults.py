"""The core simulation's faults: which one strikes next.

`Faults.strike` draws one: a node crashes with all its groups (`Simulation.crash`; at most a
minority of the nodes is down, except now and then all of them), the nodes are split into two
sides, one link is cut one way, a group's leader is isolated, every partition heals, or the
network's loss rate changes. Restarts, and the end of every fault when the run heals, are the
simulation's own (`Simulation.heal`).

Like `raftlog.sim.heal.HealPhase`, this reads the `Simulation` and acts through it, drawing from
its generator in the same order as when this lived inside it, so a seed's trace is unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.sim.network import NetFaults

if TYPE_CHECKING:
    from raftlog.sim.simulation import Simulation


class Faults:
    """The fault injector of one `Simulation` (see the module docstring)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def strike(self) -> None:
        """One fault, drawn at random (none while the run heals)."""
        sim = self.sim
        if sim.healing:
            return
        r = sim.rng
        roll = r.random()
        down = [n for n in sim.ids if not sim.up[n]]
        if roll < 0.3:
            alive = [n for n in sim.ids if sim.up[n]]
            limit = len(sim.ids) if r.random() < 0.1 else (len(sim.ids) - 1) // 2
            if alive and len(down) < limit:
                sim.crash(r.choice(alive))
        elif roll < 0.45:
            ids = list(sim.ids)
            r.shuffle(ids)
            k = r.randint(1, len(ids) - 1) if len(ids) > 1 else 1
            sim.net.partition(ids[:k], ids[k:])
            sim.stats["partitions"] += 1
            sim.log_line(f"partition {sorted(ids[:k])} | {sorted(ids[k:])}")
        elif roll < 0.6:
            if len(sim.ids) > 1:
                a, b = r.sample(sim.ids, 2)
                sim.net.cut(a, b)
                sim.stats["partitions"] += 1
                sim.log_line(f"cut {a}->{b}")
        elif roll < 0.7:
            g = r.choice(sim.groups)
            leaders = sim.leaders(g)
            if leaders:
                lead = r.choice(leaders).id
                sim.net.partition([lead], [n for n in sim.ids if n != lead])
                sim.stats["partitions"] += 1
                sim.log_line(f"isolate leader n{lead} of g{g}")
        elif roll < 0.9:
            sim.net.heal()
            sim.log_line("heal partitions")
        else:
            base = sim.params.faults
            drop = r.choice([0.0, base.drop, 0.3])
            sim.net.set_faults(NetFaults(drop, base.duplicate, 1, base.max_delay, base.slow))
            sim.log_line(f"network drop={drop}")
