"""A seeded simulator of replica moves: the real catalog (`CatalogMachine`, its placement and move
planning) and the real step rule (`cmq.catalog.placement.next_step`) against a model of the data
groups' Raft configurations, with crashes of any node (old replica, new replica, group leader, meta
leader) at every step.

The model: each group has voters, learners, a leader and per member the length of the log it
holds; a write commits when a majority of the voters (up) hold it; a membership step is a write
too (it needs a quorum) and takes effect when committed; the core's rule that a learner is
promoted only once it holds every committed entry is modelled. The catalog is one replicated
object: a proposal to it (a ``moved`` report) may be lost when the meta leader crashes.

Checked after every event:

* ``voters``: a group never has fewer voters than its goal (R): no replica leaves before its
  replacement votes;
* ``durable``: every committed entry is held by a majority of the current voters;
* ``catalog``: a group with no move in flight has exactly the catalog's replicas as voters and
  no learner;

and, after the faults stop and every node is up again, ``liveness``: within a bounded number of
events every move completes, the drained node holds nothing and every node other than it holds a
replica.

``python -m tests.cmq.movesim --seeds N`` runs more seeds.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Set
from dataclasses import dataclass, field

from cmq.catalog.meta import CatalogMachine
from cmq.catalog.placement import Step, StepKind, next_step

StepRule = Callable[[Set[int], Set[int], Set[int], int, bool], Step]


@dataclass
class Group:
    voters: set[int]
    learners: set[int] = field(default_factory=set)
    leader: int = 0
    log: dict[int, int] = field(default_factory=dict)
    """Member -> entries it holds."""
    commit: int = 0

    def quorum(self, up: Set[int]) -> bool:
        return len(self.voters & up) > len(self.voters) // 2


@dataclass
class Sim:
    seed: int
    rule: StepRule
    nodes: int = 5
    groups: int = 6
    replication: int = 3
    crash_rate: float = 0.08
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.catalog = CatalogMachine()
        self.index = 0
        self.up: set[int] = set(range(1, 4))
        for n in range(1, 4):
            self._meta(CatalogMachine.register_node(n, f"n{n}:1", ["/d"]))
        self._meta(CatalogMachine.init(self.groups, self.replication, [1, 2, 3]))
        self.model: dict[int, Group] = {}
        for g, p in self.catalog.placements.items():
            self.model[g] = Group(
                set(p.replicas), leader=min(p.replicas), log=dict.fromkeys(p.replicas, 0)
            )
        self.events = 0

    # -- the catalog ------------------------------------------------------------------------------
    def _meta(self, cmd: bytes) -> object:
        self.index += 1
        return self.catalog.apply(self.index, cmd)

    # -- events -----------------------------------------------------------------------------------
    def event(self, faults: bool) -> None:
        self.events += 1
        r = self.rng.random()
        g = self.rng.choice(sorted(self.model))
        grp = self.model[g]
        if faults and r < self.crash_rate:
            self._crash_or_restart()
        elif r < 0.3:
            self._write(grp)
        elif r < 0.5:
            self._replicate(grp)
        elif r < 0.6:
            self._elect(grp)
        else:
            self._step(g, grp, faults)
        self._check()

    def _crash_or_restart(self) -> None:
        down = sorted(set(self.catalog.nodes) - self.up)
        if down and (self.rng.random() < 0.6 or len(self.up) <= 3):
            self.up.add(self.rng.choice(down))
            return
        victim = self.rng.choice(sorted(self.up))
        self.up.discard(victim)
        for grp in self.model.values():
            if grp.leader == victim:
                grp.leader = 0

    def _write(self, grp: Group) -> None:
        if grp.leader in self.up and grp.quorum(self.up):
            last = grp.log[grp.leader] + 1
            grp.log[grp.leader] = last
            for v in grp.voters & self.up:
                if grp.log.get(v, 0) >= last - 1 and self.rng.random() < 0.8:
                    grp.log[v] = last
            holders = [v for v in grp.voters if grp.log.get(v, 0) >= last]
            if len(holders) > len(grp.voters) // 2:
                grp.commit = last

    def _replicate(self, grp: Group) -> None:
        if grp.leader not in self.up:
            return
        for m in (grp.voters | grp.learners) & self.up:
            grp.log[m] = max(grp.log.get(m, 0), grp.log[grp.leader])

    def _elect(self, grp: Group) -> None:
        if grp.leader in self.up or not grp.quorum(self.up):
            return
        cands = sorted(grp.voters & self.up, key=lambda v: (-grp.log.get(v, 0), v))
        best = cands[0]
        if grp.log.get(best, 0) >= grp.commit:  # Raft's election restriction
            grp.leader = best

    def _step(self, g: int, grp: Group, faults: bool) -> None:
        p = self.catalog.placement(g)
        if p is None or grp.leader not in self.up:
            return
        step = self.rule(grp.voters, grp.learners, set(p.goal()), grp.leader, p.move is not None)
        if step.kind in (StepKind.ADD_LEARNER, StepKind.PROMOTE, StepKind.REMOVE):
            if not grp.quorum(self.up):
                return
            n = step.node
            if step.kind is StepKind.ADD_LEARNER:
                grp.learners.add(n)
                grp.log.setdefault(n, 0)
            elif step.kind is StepKind.PROMOTE:
                if grp.log.get(n, 0) < grp.commit:
                    return  # LearnerNotReady
                grp.learners.discard(n)
                grp.voters.add(n)
            else:
                grp.voters.discard(n)
                grp.learners.discard(n)
                grp.log.pop(n, None)
                if n == grp.leader:
                    grp.leader = 0
        elif step.kind is StepKind.HAND_OVER:
            others = [v for v in sorted(p.goal()) if v in grp.voters and v in self.up]
            ready = [v for v in others if grp.log.get(v, 0) >= grp.log[grp.leader]]
            if ready:
                grp.leader = ready[0]
        elif step.kind is StepKind.REPORT and p.move is not None:
            if faults and self.rng.random() < 0.2:
                return  # the meta leader crashed: the report is lost, the next one resumes
            self._meta(CatalogMachine.moved(g, p.move.add, p.move.remove))
        if faults and self.rng.random() < self.crash_rate:
            self._crash_or_restart()  # a crash right after the step

    # -- invariants -------------------------------------------------------------------------------
    def _check(self) -> None:
        for g, grp in self.model.items():
            p = self.catalog.placement(g)
            assert p is not None
            if len(grp.voters) < min(self.replication, len(p.goal())):
                self._fail(f"voters: group {g} has voters {sorted(grp.voters)}")
            holders = [v for v in grp.voters if grp.log.get(v, 0) >= grp.commit]
            if len(holders) <= len(grp.voters) // 2:
                self._fail(f"durable: group {g} commit {grp.commit} held by {holders}")
            if p.move is None and (grp.voters != set(p.replicas) or grp.learners):
                self._fail(f"catalog: group {g} voters {sorted(grp.voters)} != {p.replicas}")

    def _fail(self, what: str) -> None:
        if len(self.violations) < 5:
            self.violations.append(f"seed {self.seed} event {self.events}: {what}")

    # -- a run ------------------------------------------------------------------------------------
    def run(self, steps: int = 1500, heal: int = 3000) -> list[str]:
        """Nodes 4 and 5 join, later node 1 is drained, with faults; then heal and settle."""
        for k in range(steps):
            if k == steps // 5:
                for n in (4, 5):
                    self._meta(CatalogMachine.register_node(n, f"n{n}:1", ["/d"]))
                    self.up.add(n)
            if k == steps // 2:
                self._meta(CatalogMachine.drain(1))
            self.event(faults=True)
        self.up = set(self.catalog.nodes)
        for _ in range(heal):
            self.event(faults=False)
            if self._settled():
                return self.violations
        self._fail(f"liveness: not settled {heal} events after healing: {self.catalog.groups()}")
        return self.violations

    def _settled(self) -> bool:
        cat = self.catalog
        if any(p.move is not None for p in cat.placements.values()):
            return False
        if cat.hosted_by(1) or not all(cat.hosted_by(n) for n in (2, 3, 4, 5)):
            return False
        return all(
            grp.voters == set(cat.placements[g].replicas) and not grp.learners
            for g, grp in self.model.items()
        )


def remove_first(
    voters: Set[int], learners: Set[int], goal: Set[int], leader: int, pending: bool
) -> Step:
    """A planted bug: the old replica leaves before its replacement is a voter."""
    for n in sorted(voters - goal):
        return Step(StepKind.HAND_OVER if n == leader else StepKind.REMOVE, n)
    return next_step(voters, learners, goal, leader, pending)


def run_seeds(seeds: range, rule: StepRule = next_step) -> list[str]:
    out: list[str] = []
    for s in seeds:
        out += Sim(s, rule).run()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first", type=int, default=0)
    args = ap.parse_args()
    bad = run_seeds(range(args.first, args.first + args.seeds))
    print("\n".join(bad) if bad else f"{args.seeds} seeds: no violation")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
