"""Placement (pure): founding replicas, zones, balance, move planning, preferred leaders, the
step rule; and the catalog's node commands (drain, forget, moved)."""

from __future__ import annotations

from collections import Counter

from cmq.catalog.meta import CatalogMachine, Refused
from cmq.catalog.placement import (
    DRAINING,
    GroupPlacement,
    Move,
    NodeInfo,
    Step,
    StepKind,
    next_step,
    place_groups,
    plan_moves,
    preferred_leaders,
)


def nodes(zones: str) -> dict[int, NodeInfo]:
    """Node i+1 in zone zones[i] ("-": no zone)."""
    return {
        i + 1: NodeInfo(f"10.0.0.{i + 1}:9080", ("/d",), "" if z == "-" else z)
        for i, z in enumerate(zones)
    }


def load(groups: dict[int, GroupPlacement]) -> Counter[int]:
    return Counter(n for p in groups.values() for n in p.replicas)


def test_founding_replicas_are_distinct_zone_diverse_and_balanced() -> None:
    ns = nodes("aabbcc")
    groups = place_groups(list(range(1, 7)), ns, {}, 3)
    for p in groups.values():
        assert len(set(p.replicas)) == 3 and p.replicas == p.founders
        assert {ns[n].zone for n in p.replicas} == {"a", "b", "c"}
    assert set(load(groups).values()) == {3}


def test_fewer_nodes_than_replicas_place_on_every_node() -> None:
    groups = place_groups([1, 2], nodes("--"), {}, 3)
    assert all(p.replicas == (1, 2) for p in groups.values())


def test_moves_are_bounded_one_per_group_and_fill_a_new_node() -> None:
    ns = nodes("---")
    groups = place_groups(list(range(1, 7)), ns, {}, 3)
    ns[4] = NodeInfo("10.0.0.4:9080", ("/d",))
    moves = plan_moves(ns, groups, 3, max_moves=2)
    assert len(moves) == 2 and all(m.add == 4 for m in moves.values())
    # Applying every planned move (two at a time) ends balanced: 18 replicas over 4 nodes.
    for _ in range(20):
        moves = plan_moves(ns, groups, 3, max_moves=2)
        if not moves:
            break
        for g, m in moves.items():
            goal = GroupPlacement(groups[g].replicas, groups[g].founders, m).goal()
            groups[g] = GroupPlacement(goal, groups[g].founders, None, True)
    per_node = [load(groups)[n] for n in ns]
    assert sorted(per_node) == [4, 4, 5, 5], per_node


def test_a_draining_node_is_emptied_into_the_missing_zone() -> None:
    ns = nodes("abcc")
    groups = place_groups([1], ns, {}, 3)
    assert groups[1].replicas == (1, 2, 3)
    ns[3] = NodeInfo("10.0.0.3:9080", ("/d",), "c", state=DRAINING)
    assert plan_moves(ns, groups, 3, 2) == {1: Move(add=4, remove=3)}


def test_a_move_never_narrows_a_group_s_zones() -> None:
    ns = nodes("abc") | {4: NodeInfo("x:1", ("/d",), "a"), 5: NodeInfo("y:1", ("/d",), "a")}
    groups = place_groups(list(range(1, 4)), nodes("abc"), {}, 3)
    for g, m in plan_moves(ns, groups, 3, 10).items():
        assert m.remove == 1 and m.add in (4, 5), (g, m)  # only node 1 shares zone a


def test_preferred_leaders_are_spread() -> None:
    ns = nodes("-----")
    groups = place_groups(list(range(1, 11)), ns, {}, 3)
    counts = Counter(preferred_leaders(groups, ns).values())
    assert sorted(counts) == [1, 2, 3, 4, 5] and max(counts.values()) == 2


def test_next_step_adds_promotes_hands_over_then_removes() -> None:
    goal = {2, 3, 4}
    assert next_step({1, 2, 3}, set(), goal, 1, True) == Step(StepKind.ADD_LEARNER, 4)
    assert next_step({1, 2, 3}, {4}, goal, 1, True) == Step(StepKind.PROMOTE, 4)
    assert next_step({1, 2, 3, 4}, set(), goal, 1, True) == Step(StepKind.HAND_OVER, 1)
    assert next_step({1, 2, 3, 4}, set(), goal, 2, True) == Step(StepKind.REMOVE, 1)
    assert next_step(goal, set(), goal, 2, True) == Step(StepKind.REPORT)
    assert next_step(goal, set(), goal, 2, False) == Step(StepKind.NONE)
    assert next_step(goal, {7}, goal, 2, False) == Step(StepKind.REMOVE, 7)


def test_catalog_drain_forget_and_moved() -> None:
    m = CatalogMachine()
    for n in (1, 2, 3):
        m.apply(n, CatalogMachine.register_node(n, f"10.0.0.{n}:1", ["/d"]))
    m.apply(4, CatalogMachine.init(2, 3, [1, 2, 3]))
    refused = m.apply(5, CatalogMachine.drain(1))  # only 2 active nodes would remain
    assert isinstance(refused, Refused) and refused.code == "NodeBusy"
    assert isinstance(m.apply(6, CatalogMachine.drain(9)), Refused)
    m.apply(7, CatalogMachine.register_node(4, "10.0.0.4:1", ["/d"]))
    moving = {g: p.move for g, p in m.placements.items() if p.move is not None}
    assert moving and all(mv.add == 4 for mv in moving.values())
    assert m.apply(8, CatalogMachine.drain(1)) is True
    forget = m.apply(9, CatalogMachine.forget(1))
    assert isinstance(forget, Refused) and forget.code == "NodeBusy"
    g, mv = next(iter(moving.items()))
    assert m.apply(10, CatalogMachine.moved(g, mv.add + 1, mv.remove)) is False  # not this move
    assert m.apply(11, CatalogMachine.moved(g, mv.add, mv.remove)) is True
    assert m.apply(12, CatalogMachine.moved(g, mv.add, mv.remove)) is False  # already done
    assert 4 in m.placements[g].replicas and m.placements[g].moved
    assert m.apply(13, CatalogMachine.hosts(4)) == list(m.hosted_by(4))


def test_a_move_onto_a_node_that_is_drained_is_cancelled_and_replanned() -> None:
    m = CatalogMachine()
    for n in (1, 2, 3):
        m.apply(n, CatalogMachine.register_node(n, f"10.0.0.{n}:1", ["/d"]))
    m.apply(4, CatalogMachine.init(2, 3, [1, 2, 3]))
    m.apply(5, CatalogMachine.register_node(4, "10.0.0.4:1", ["/d"]))
    m.apply(6, CatalogMachine.register_node(5, "10.0.0.5:1", ["/d"]))
    onto_4 = [g for g, p in m.placements.items() if p.move is not None and p.move.add == 4]
    assert onto_4
    assert m.apply(7, CatalogMachine.drain(4)) is True
    for g in onto_4:
        p = m.placements[g]
        assert p.move is None or p.move.add != 4, p
        assert 4 not in p.hosts()
    # The group's leader, which had already made node 4 a voter, takes it out again.
    p = m.placements[onto_4[0]]
    voters, learners, leader = set(p.replicas) | {4}, set(), 4
    for _ in range(10):
        step = next_step(voters, learners, set(p.goal()), leader, p.move is not None)
        if step.kind is StepKind.ADD_LEARNER:
            learners.add(step.node)
        elif step.kind is StepKind.PROMOTE:
            learners.discard(step.node)
            voters.add(step.node)
        elif step.kind is StepKind.REMOVE:
            voters.discard(step.node)
        elif step.kind is StepKind.HAND_OVER:
            leader = min(voters - {leader})
        else:
            break
        assert len(voters) >= 3
    assert voters == set(p.goal()) and 4 not in voters and not learners


def test_each_node_spreads_its_groups_over_its_data_directories() -> None:
    m = CatalogMachine()
    for n in (1, 2, 3):
        m.apply(n, CatalogMachine.register_node(n, f"10.0.0.{n}:1", ["/a", "/b", "/c"]))
    m.apply(4, CatalogMachine.init(6, 3, [1, 2, 3]))
    m.apply(5, CatalogMachine.register_node(4, "10.0.0.4:1", ["/x", "/y"]))
    per_dir: Counter[tuple[int, int]] = Counter()
    for p in m.placements.values():
        for n in p.hosts():
            d = p.dir_of(n)
            assert d is not None, (n, p)
            per_dir[(n, d)] += 1
    for n in (1, 2, 3):  # six groups over three directories: two each
        assert [per_dir[(n, d)] for d in range(3)] == [2, 2, 2]
    incoming = [p.dir_of(4) for p in m.placements.values() if 4 in p.hosts()]
    assert (
        incoming
        and max(incoming.count(0), incoming.count(1)) - min(incoming.count(0), incoming.count(1))
        <= 1
    )
    g = next(g for g, p in m.placements.items() if p.move is not None)
    assert m.groups()[g]["data_dirs"][4] in ("/x", "/y")
