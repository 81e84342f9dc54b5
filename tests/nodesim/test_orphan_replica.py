"""A replica left behind by a move its leader did not live to finish (docs/chaos.md, seed 26113).

Five real nodes under the whole-node simulator (`tests.nodesim.sim`), no random faults: a drain
moves data group 2 off the node that leads it, and that node is killed (SIGKILL) once the move's
learner is added. The group elects a new leader, which finishes the move without it; the killed
node restarts. Its own configuration of the group is stale (it still lists itself as a voter)
and the catalog no longer places the group on it: within a bounded time it must drop its replica
and delete the group's data, and the group's real configuration must never count it again.

Two ways back:

- ``heard_then_removed`` (the chaos run's): the node restarts while the move still waits for
  its learner (cut off from the new leader), hears the new leader once, and is removed before
  it caught up (its link to the leader breaks: the removal wins the race against its catch-up;
  healed once the move is done). It keeps that leader as a memory: recovery
  (`raftlog.core.recovery`) keeps it out of elections, its log being below the floor its peers
  answered, so it never campaigns and never forgets the leader, which, having removed it,
  never speaks to it again. Membership took the leader it remembered for a live one ("a
  replica with a leader is a member of its leader's configuration") and kept it for ever.
- ``after_the_move``: it restarts once the move is done, hears no leader at all, and goes after
  `cmq.node.membership.LEADERLESS_BEFORE_DROP` seconds (what worked already).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from cmq.node.queue_node import QueueNode
from raftlog.core import Role
from tests.nodesim.faults import seeded_ids
from tests.nodesim.sim import NodeSim, NodeSimConfig

pytestmark = pytest.mark.usefixtures("quiet_logging")

SEED = 26113
"""Five nodes, two data groups, a snapshot every 30 entries (the catch-up needs a snapshot)."""
DROP_WITHIN = 20.0
"""Virtual seconds (from the later of its restart and the move's end) within which the
left-behind replica must be gone."""


@dataclass
class Outcome:
    group: int = 0
    victim: int = 0
    heard: int = 0
    """The leader the restarted victim heard before its removal (0: none)."""
    dropped_after: float | None = None
    """Seconds from the later of its restart and the move's end until the replica was gone."""
    stuck: str = ""
    """The victim's replica as it was at the end, when it was not dropped."""
    data_left: list[str] = field(default_factory=list)
    counted: list[str] = field(default_factory=list)
    """Moments a leader's configuration listed the victim as a voter after its removal."""
    trace: list[str] = field(default_factory=list)


def _leader(sim: NodeSim, group: int) -> tuple[int, QueueNode] | None:
    """The running leader of ``group`` in the highest term."""
    best: tuple[int, int, QueueNode] | None = None
    for nid in sim.ids:
        node = sim.nodes[nid].node
        if node is None or group not in node.raft.groups:
            continue
        r = node.raft.groups[group].raw.raft
        if r.role is Role.LEADER and (best is None or r.term > best[0]):
            best = (r.term, nid, node)
    return None if best is None else (best[1], best[2])


def _catalog(sim: NodeSim, avoid: int) -> QueueNode | None:
    for nid in sim.ids:
        node = sim.nodes[nid].node
        if nid != avoid and node is not None and node.catalog.initialized:
            return node
    return None


async def _until(sim: NodeSim, cond: Callable[[], object], limit: float, what: str) -> None:
    deadline = sim.loop.time() + limit
    while not cond():
        if sim.loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {sim.result.trace[-20:]}")
        await asyncio.sleep(0.01)


def _describe(node: QueueNode, group: int) -> str:
    r = node.raft.groups[group].raw.raft
    return (
        f"{r.role.name.lower()} term {r.term} lead n{r.lead} voters {list(r.conf.voters)} "
        f"commit {r.log.committed} last {r.log.last_index()} floor {r.log_floor} "
        f"silent {r.election_elapsed} ticks quiesced {node.raft.groups[group].quiesced}"
    )


async def _scenario(sim: NodeSim, out: Outcome, way: str) -> None:
    for nid in sim.ids:
        sim.start_node(nid)
    await _until(
        sim,
        lambda: (
            (c := _catalog(sim, 0)) is not None
            and all(_leader(sim, g) is not None for g in c.catalog.data_groups)
        ),
        30.0,
        "the cluster to form",
    )
    stop = asyncio.Event()
    work = sim.workload
    await work.create_queues()
    producers = [sim.loop.create_task(work.producer(i, stop)) for i in range(8)]
    await asyncio.sleep(3.0)
    cat = _catalog(sim, 0)
    assert cat is not None
    group = out.group = max(cat.catalog.data_groups)
    led = _leader(sim, group)
    assert led is not None
    victim = out.victim = led[0]
    via = next(n for n in sim.ids if n != victim)
    drain = sim.loop.create_task(sim.call(via, 10.0, lambda q: q.drain_node(victim)))

    def learner() -> bool:
        lead = _leader(sim, group)
        return lead is not None and bool(lead[1].raft.conf(group).learners)

    await _until(sim, learner, 20.0, "the move's learner")
    lead = _leader(sim, group)
    assert lead is not None
    newcomer = lead[1].raft.conf(group).learners[0]
    sim.kill(victim, power=False)
    sim.note(f"TEST killed n{victim}, leader of g{group}, its learner n{newcomer} added")
    await _until(
        sim,
        lambda: (lead := _leader(sim, group)) is not None and lead[0] != victim,
        10.0,
        "a leader",
    )
    lead = _leader(sim, group)
    assert lead is not None
    leader = lead[0]
    if way == "heard_then_removed":
        # The move waits for its learner while the group goes on (and compacts its log).
        sim.net.cut(newcomer, leader)
        await asyncio.sleep(3.0)
        sim.start_node(victim)
        n = sim.nodes[victim]
        await _until(
            sim,
            lambda: (
                n.node is not None
                and group in n.node.raft.groups
                and n.node.raft.leader_of(group) != 0
            ),
            10.0,
            "the restarted victim to hear a leader",
        )
        assert n.node is not None
        out.heard = n.node.raft.leader_of(group)
        sim.note(f"TEST n{victim} heard n{out.heard}: {_describe(n.node, group)}")
        sim.net.cut(victim, leader)  # its catch-up breaks off
        sim.net.heal(newcomer, leader)  # and the move goes on

    def moved() -> bool:
        c = _catalog(sim, victim)
        p = c.catalog.placement(group) if c is not None else None
        lead = _leader(sim, group)
        return (
            p is not None
            and p.move is None
            and victim not in p.replicas
            and lead is not None
            and victim not in lead[1].raft.conf(group).members()
        )

    await _until(sim, moved, 30.0, "the move to complete without the victim")
    sim.note(f"TEST g{group} moved off n{victim}")
    sim.net.heal(victim, leader)
    await drain
    stop.set()  # enough history: the rest is about the victim
    await asyncio.gather(*producers)
    if way == "after_the_move":
        sim.start_node(victim)
    n = sim.nodes[victim]
    await _until(sim, lambda: n.ready, 10.0, "the victim to start")
    start = sim.loop.time()
    end = start + DROP_WITHIN
    while sim.loop.time() < end:
        node = n.node
        assert node is not None
        if out.dropped_after is None and group not in node.raft.groups:
            out.dropped_after = sim.loop.time() - start
            sim.note(f"TEST n{victim} dropped g{group}")
            end = min(end, sim.loop.time() + 2.0)  # and is not counted again
        lead = _leader(sim, group)
        if lead is not None and victim in lead[1].raft.conf(group).voters:
            out.counted.append(f"{sim.loop.time():.3f} by n{lead[0]}")
        await asyncio.sleep(0.05)
    node = n.node
    assert node is not None
    if group in node.raft.groups:
        out.stuck = _describe(node, group)
        sim.note(f"TEST n{victim} still holds g{group}: {out.stuck}")
    if group in node.raft.stored_groups():
        out.data_left.append("its log")
    out.data_left += [p for p in n.files.stores if p.endswith(f"/segments/g{group}")]
    for nid in sim.ids:
        proc = sim.nodes[nid].proc
        if proc is not None:
            sim.loop.kill(proc)


def run(way: str, seed: int = SEED) -> Outcome:
    sim = NodeSim(seed, NodeSimConfig(nodes=5, groups=2, faults=False, buggify=False))
    out = Outcome()
    with seeded_ids(sim._rng("ids")):
        try:
            sim.loop.run_until_complete(_scenario(sim, out, way))
        finally:
            out.trace = sim.result.trace
            sim.loop.close()
    return out


@pytest.mark.parametrize("way", ["heard_then_removed", "after_the_move"])
def test_a_replica_left_behind_by_a_move_is_dropped_after_its_restart(way: str) -> None:
    out = run(way)
    if way == "heard_then_removed":
        assert out.heard, out  # the scenario did what it says
    assert out.dropped_after is not None, (out.stuck, [t for t in out.trace if "TEST" in t])
    assert not out.data_left, out.data_left
    assert not out.counted, out.counted
