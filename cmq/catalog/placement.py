"""Replica placement: pure functions the catalog (`cmq.catalog.meta.CatalogMachine`) calls inside
apply.

Everything here is deterministic (sorted iteration, ties broken by id) so every replica of the
meta group computes the same placement from the same catalog state.

* `place_groups`: the founding replicas of new data groups: R distinct nodes each, distinct
  zones first, the least-loaded nodes first.
* `plan_moves`: the next replica moves (one per group, a bounded number in all): a replica on a
  draining node moves away; a group with fewer than R replicas gains one; otherwise a replica moves
  from the most-loaded node of a group to the least-loaded node outside it when that narrows the
  spread by two or more. A move never makes a group's zone spread worse.
* `preferred_leaders`: a leader per data group, about G/N per node, among its replicas.
* `next_step`: the one membership step a group's leader takes next towards the catalog's goal
  (add the new node as a learner, promote it, hand leadership away if the leader is leaving,
  remove the old replica, report the move done). The Raft core refuses to promote a learner
  that is not caught up, so a promotion is retried until it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from enum import Enum

import msgspec

ACTIVE = "active"
DRAINING = "draining"


class NodeInfo(msgspec.Struct, frozen=True):
    """A registered node: peer address (``host:port``), HTTP address, data directories, zone
    label ("" when none) and state (`ACTIVE` or `DRAINING`)."""

    address: str
    data_dirs: tuple[str, ...] = ()
    zone: str = ""
    http: str = ""
    state: str = ACTIVE


class Move(msgspec.Struct, frozen=True):
    """A replica move in flight: ``add`` joins the group (learner, then voter), then ``remove``
    (0: none) leaves it. The group's leader carries out the steps; the catalog records the
    move until the leader reports the group's voters are the goal (`GroupPlacement.goal`)."""

    add: int
    remove: int = 0


class GroupPlacement(msgspec.Struct, frozen=True):
    """A data group's replicas (its voters once no move is in flight) and founding voters.

    ``moved``: the group's membership changed since it was founded, so a node opening it for
    the first time starts empty and is caught up by the leader (founders bootstrap only while
    nothing moved)."""

    replicas: tuple[int, ...]
    founders: tuple[int, ...]
    move: Move | None = None
    moved: bool = False
    dirs: tuple[tuple[int, int], ...] = ()
    """(node, index of the data directory it keeps this group in), sorted by node: chosen by
    the catalog (`pick_dir`) when the node is given the group."""

    def dir_of(self, node: int) -> int | None:
        for n, d in self.dirs:
            if n == node:
                return d
        return None

    def with_dir(self, node: int, index: int | None) -> GroupPlacement:
        """This placement with ``node``'s directory set (None: forgotten)."""
        rest = [(n, d) for n, d in self.dirs if n != node]
        if index is not None:
            rest.append((node, index))
        return msgspec.structs.replace(self, dirs=tuple(sorted(rest)))

    def goal(self) -> tuple[int, ...]:
        """The voters once the move in flight (if any) completes."""
        if self.move is None:
            return self.replicas
        keep = {n for n in self.replicas if n != self.move.remove}
        return tuple(sorted(keep | {self.move.add}))

    def hosts(self) -> tuple[int, ...]:
        """Every node that should run a replica now (replicas and a move's new node)."""
        if self.move is None:
            return self.replicas
        return tuple(sorted({*self.replicas, self.move.add}))


def _load(groups: Mapping[int, GroupPlacement]) -> dict[int, int]:
    load: dict[int, int] = {}
    for p in groups.values():
        for n in p.hosts():
            load[n] = load.get(n, 0) + 1
        if p.move is not None and p.move.remove:
            load[p.move.remove] = load.get(p.move.remove, 0) - 1
    return load


def _pick(
    candidates: list[int],
    nodes: Mapping[int, NodeInfo],
    load: Mapping[int, int],
    used_zones: set[str],
) -> int | None:
    """The best node for a new replica: a zone not used yet, then the fewest replicas, then the
    lowest id."""
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda n: (
            1 if nodes[n].zone and nodes[n].zone in used_zones else 0,
            load.get(n, 0),
            n,
        ),
    )


def place_groups(
    new_groups: list[int],
    nodes: Mapping[int, NodeInfo],
    existing: Mapping[int, GroupPlacement],
    replication: int,
) -> dict[int, GroupPlacement]:
    """Founding placements of ``new_groups`` on the active ``nodes`` (R = ``replication`` or
    every active node when there are fewer), balanced with the ``existing`` groups."""
    active = sorted(n for n, i in nodes.items() if i.state == ACTIVE)
    load = _load(existing)
    out: dict[int, GroupPlacement] = {}
    for g in sorted(new_groups):
        chosen: list[int] = []
        zones: set[str] = set()
        while len(chosen) < min(replication, len(active)):
            n = _pick([a for a in active if a not in chosen], nodes, load, zones)
            if n is None:
                break
            chosen.append(n)
            zones.add(nodes[n].zone)
            load[n] = load.get(n, 0) + 1
        replicas = tuple(sorted(chosen))
        out[g] = GroupPlacement(replicas=replicas, founders=replicas)
    return out


def pick_dir(node: int, nodes: Mapping[int, NodeInfo], groups: Mapping[int, GroupPlacement]) -> int:
    """The data directory of ``node`` holding the fewest of its groups (ties: the lowest)."""
    count = [0] * max(1, len(nodes[node].data_dirs) if node in nodes else 1)
    for p in groups.values():
        d = p.dir_of(node)
        if d is not None and d < len(count):
            count[d] += 1
    return min(range(len(count)), key=lambda i: (count[i], i))


def _zone_count(members: list[int], nodes: Mapping[int, NodeInfo]) -> int:
    return len({nodes[n].zone if n in nodes else f"?{n}" for n in members})


def plan_moves(
    nodes: Mapping[int, NodeInfo],
    groups: Mapping[int, GroupPlacement],
    replication: int,
    max_moves: int,
) -> dict[int, Move]:
    """New moves (group -> move) so that at most ``max_moves`` are in flight in all, at most
    one per group (see the module docstring for the order)."""
    in_flight = sum(1 for p in groups.values() if p.move is not None)
    budget = max_moves - in_flight
    if budget <= 0:
        return {}
    active = sorted(n for n, i in nodes.items() if i.state == ACTIVE)
    load = _load(groups)
    planned: dict[int, Move] = {}
    free = sorted(g for g, p in groups.items() if p.move is None)

    def target_for(g: int, keep: list[int]) -> int | None:
        zones = {nodes[n].zone for n in keep if n in nodes}
        return _pick([a for a in active if a not in groups[g].replicas], nodes, load, zones)

    def commit(g: int, move: Move) -> None:
        planned[g] = move
        load[move.add] = load.get(move.add, 0) + 1
        if move.remove:
            load[move.remove] = load.get(move.remove, 0) - 1

    # 1. Replicas on draining or forgotten nodes move away; 2. short groups gain a replica.
    for g in free:
        if len(planned) >= budget:
            return planned
        reps = list(groups[g].replicas)
        gone = [n for n in reps if n not in nodes or nodes[n].state != ACTIVE]
        if gone:
            keep = [n for n in reps if n not in gone]
            t = target_for(g, keep)
            if t is not None:
                commit(g, Move(add=t, remove=gone[0]))
            continue
        if len(reps) < replication:
            t = target_for(g, reps)
            if t is not None:
                commit(g, Move(add=t))
    # 3. Balance: from a loaded replica to a less-loaded outsider, the largest gain first,
    # never narrowing the group's zones.
    while len(planned) < budget:
        best: tuple[int, int, int, int] | None = None  # (-gain, group, from, to)
        for g in free:
            if g in planned:
                continue
            reps = list(groups[g].replicas)
            zones = _zone_count(reps, nodes)
            for src in reps:
                keep = [n for n in reps if n != src]
                for dst in active:
                    if dst in reps:
                        continue
                    gain = load.get(src, 0) - load.get(dst, 0)
                    if gain < 2 or _zone_count([*keep, dst], nodes) < zones:
                        continue
                    cand = (-gain, g, src, dst)
                    if best is None or cand < best:
                        best = cand
        if best is None:
            break
        _, g, src, dst = best
        commit(g, Move(add=dst, remove=src))
    return planned


def preferred_leaders(
    groups: Mapping[int, GroupPlacement], nodes: Mapping[int, NodeInfo]
) -> dict[int, int]:
    """One preferred leader per group among its active replicas, about G/N per node (groups in
    id order, each to its replica leading the fewest so far; ties: the lowest id)."""
    count: dict[int, int] = {}
    out: dict[int, int] = {}
    for g in sorted(groups):
        p = groups[g]
        if p.move is not None:
            continue  # a group in the middle of a move keeps its leader
        reps = [n for n in p.replicas if n in nodes and nodes[n].state == ACTIVE]
        if not reps:
            continue
        n = min(reps, key=lambda r: (count.get(r, 0), (r - g) % 1000003))
        count[n] = count.get(n, 0) + 1
        out[g] = n
    # Greedy leaves some nodes two ahead: hand single groups over while that narrows the gap.
    changed = True
    while changed:
        changed = False
        for g in sorted(out):
            lead = out[g]
            reps = [n for n in groups[g].replicas if n in nodes and nodes[n].state == ACTIVE]
            better = min(reps, key=lambda r: (count.get(r, 0), r))
            if count.get(better, 0) + 1 < count[lead]:
                count[lead] -= 1
                count[better] = count.get(better, 0) + 1
                out[g] = better
                changed = True
    return out


class StepKind(Enum):
    NONE = "none"
    ADD_LEARNER = "add_learner"
    PROMOTE = "promote"
    REMOVE = "remove"
    HAND_OVER = "hand_over"
    """The leader itself is leaving: give leadership to another goal voter first."""
    REPORT = "report"
    """The group's voters are the goal: record the move as done in the catalog."""


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    node: int = 0


def next_step(
    voters: Set[int], learners: Set[int], goal: Set[int], leader: int, move_pending: bool
) -> Step:
    """The next step of a group whose configuration is (``voters``, ``learners``), led by
    ``leader``, towards voters == ``goal``: never removes a voter before every goal node is a
    voter, so the group has at least as many voters as the goal throughout."""
    for n in sorted(goal - voters - learners):
        return Step(StepKind.ADD_LEARNER, n)
    for n in sorted(learners & goal):
        return Step(StepKind.PROMOTE, n)
    for n in sorted(learners - goal):
        return Step(StepKind.REMOVE, n)
    for n in sorted(voters - goal):
        return Step(StepKind.HAND_OVER if n == leader else StepKind.REMOVE, n)
    if move_pending and voters == goal:
        return Step(StepKind.REPORT)
    return Step(StepKind.NONE)
