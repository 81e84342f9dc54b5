"""What a whole-node simulation judges (`tests.nodesim.sim` runs them): while it runs, the
observer's look every 50 ms (halted groups, replicas that lost acknowledged entries, two leaders
in one term); in failover mode, each fault's recovery as the prober saw it; at the end, the
replicas (every one of a group at the same applied index with the same image and segment hashes,
every catalog image equal) and the history (`tests.chaos.checker.check`, and no message stored
twice). Each finding is a `NodeSim.violation`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from raftlog import buggify
from raftlog.core import Role
from raftlog.errors import ProposalDropped, is_storage_damage
from tests.chaos.checker import check, compare_digests
from tests.nodesim.failover import FailoverNemesis, recovery, refusals, worst_wait

if TYPE_CHECKING:
    from tests.nodesim.sim import NodeSim


# -- while it runs ---------------------------------------------------------------------------------
async def observe(sim: NodeSim) -> None:
    """Every 50 ms: halted groups, replicas that lost acknowledged entries, two leaders in
    one term, and the ``raft.early_snapshot`` fault point. A group halted on damage while
    its repair is under way, and a replica a repair reset (it lost its damaged copy on
    purpose, and votes again only once caught up), are expected (``--rot``)."""
    while True:
        await asyncio.sleep(0.05)
        for nid in sim.ids:
            n = sim.nodes[nid]
            if n.node is None or n.proc is None or n.proc.paused:
                continue
            for g, d in list(n.node.raft.groups.items()):
                repairing = is_storage_damage(d.stopped) if d.stopped else False
                if (
                    d.stopped is not None
                    and not isinstance(d.stopped, ProposalDropped)
                    and not (repairing and n.node.raft.repairs.under_way(g))
                ):
                    sim.violation(f"group {g} on n{nid} halted: {d.stopped!r}")
                r = d.raw.raft
                if r.lost_acknowledged and not d.reset_by_repair:
                    sim.violation(f"group {g} on n{nid} lost entries it had acknowledged")
                if r.role is Role.LEADER:
                    other = sim.leaders.setdefault((g, r.term), nid)
                    if other != nid:
                        sim.violation(f"two leaders of group {g} in term {r.term}")
                if buggify.buggify("raft.early_snapshot"):
                    sim.loop.call_soon(d.request_snapshot, context=n.proc.context())
        if sim.cfg.failover:
            _note_leaders(sim)


def _note_leaders(sim: NodeSim) -> None:
    """(``failover``) note each group's leader when it (or its clock's trust) changes: the
    running leader of the highest term among the nodes up."""
    now: dict[int, tuple[int, int, bool]] = {}
    for nid in sim.ids:
        n = sim.nodes[nid]
        if n.node is None or n.proc is None or n.proc.paused:
            continue
        for g, d in n.node.raft.groups.items():
            r = d.raw.raft
            if r.role is Role.LEADER and (g not in now or now[g][1] < r.term):
                now[g] = (nid, r.term, n.node.clock.trusted())
    for g in sorted(set(now) | set(sim.led)):
        if now.get(g) != sim.led.get(g):
            if g in now:
                nid, term, trusted = now[g]
                clock = "" if trusted else " (clock NOT trusted: stamps nothing)"
                sim.note(f"g{g} leader n{nid} term {term}{clock}")
            else:
                sim.note(f"g{g} no leader up")
    sim.led = now


# -- failover ------------------------------------------------------------------------------------
async def judge_failovers(sim: NodeSim, stop: asyncio.Event) -> None:
    """(``failover``) probe on until every queue confirmed a send started after the last
    fault (at most 20 s more), then judge each fault's recovery."""
    prober, nemesis = sim.prober, sim.nemesis
    assert prober is not None and isinstance(nemesis, FailoverNemesis)
    last = nemesis.faults[-1].at if nemesis.faults else sim.loop.time()
    deadline = sim.loop.time() + 20.0
    while sim.loop.time() < deadline and not prober.confirmed_since(last):
        await asyncio.sleep(0.1)
    stop.set()
    while prober._inflight:
        await asyncio.sleep(0.1)
    bound = sim.cfg.failover_bound
    ends = [f.at for f in nemesis.faults[1:]] + [sim.loop.time()]
    for i, (f, end) in enumerate(zip(nemesis.faults, ends, strict=True), 1):
        first = recovery(prober.sends, prober.queues, f.at)
        took, at = worst_wait(prober.sends, prober.queues, f.at, end)
        took = max(took, first)
        sim.result.failovers.append((f.kind, took))
        why = refusals(prober.sends, at, at + min(took, 60.0))
        sim.result.trace.append(f"{f.at + first:8.3f} RECOVERED #{i} {f.describe()}: {first:.3f} s")
        late = f" (sends from {at:.3f} waited {took:.3f} s)" if took > first else ""
        if late:
            sim.result.trace.append(f"{at + took:8.3f} LATE GAP #{i}{late}")
        if took > bound:
            sim.violation(
                f"failover: #{i} {f.describe()}: no fresh send confirmed on every data "
                f"group for {took:.3f} s{late or ' after it'} (bound {bound:g} s)"
                + (f"; refused: {why}" if why else "")
            )
        elif why:
            sim.result.trace.append(f"{at + took:8.3f}   refused #{i}: {why}")
    sim.result.trace.sort(key=lambda line: float(line[:8]))


# -- the end -------------------------------------------------------------------------------------
async def check_replicas(sim: NodeSim) -> None:
    """Wait for every replica to apply the same index, then compare their state."""
    deadline = sim.loop.time() + sim.cfg.heal_seconds
    while sim.loop.time() < deadline and not _converged(sim):
        await asyncio.sleep(0.1)
    if not _converged(sim):
        sim.violation(f"replicas did not converge: {_applied(sim)}")
        return
    nodes = {nid: sim.nodes[nid].node for nid in sim.ids}
    catalogs = {nid: n.catalog.snapshot() for nid, n in nodes.items() if n is not None}
    if len(set(catalogs.values())) > 1:
        sim.violation("catalog images differ between nodes at equal applied index")
    digests: dict[int, dict[int, dict[str, Any]]] = {}
    for g, hosts in _hosts(sim).items():
        for nid in hosts:
            outcome, d, detail = await sim.call(nid, 5.0, lambda q, g=g: q.group_digest(g))
            if outcome != "ok" or d is None:
                sim.violation(f"group {g}: no digest from n{nid}: {detail}")
                continue
            digests.setdefault(g, {})[nid] = dataclasses.asdict(d)
    for problem in compare_digests(digests):
        sim.violation(problem)


def _hosts(sim: NodeSim) -> dict[int, tuple[int, ...]]:
    """Each data group's replicas (as the first running node's catalog has them)."""
    for nid in sim.ids:
        node = sim.nodes[nid].node
        if node is not None:
            cat = node.catalog
            return {
                g: tuple(sorted(p.hosts()))
                for g in cat.data_groups
                if (p := cat.placement(g)) is not None
            }
    return {}


def _applied(sim: NodeSim) -> dict[int, dict[int, tuple[int, int]]]:
    out: dict[int, dict[int, tuple[int, int]]] = {}
    groups = {0: sim.ids} | _hosts(sim)
    for g, hosts in groups.items():
        for nid in hosts:
            node = sim.nodes[nid].node
            if node is None or g not in node.raft.groups:
                out.setdefault(g, {})[nid] = (-1, -1)
                continue
            st = node.raft.status(g)
            out.setdefault(g, {})[nid] = (st.applied, st.commit)
    return out


def _converged(sim: NodeSim) -> bool:
    for by_node in _applied(sim).values():
        seen = set(by_node.values())
        if len(seen) != 1 or any(a != c or a < 0 for a, c in seen):
            return False
    return True


def check_history(sim: NodeSim) -> None:
    ops = sim.workload.history.ops
    rep = check(ops, tolerance=2 * sim.clock_bound_ms / 1000 + 0.05)
    sim.result.ops = rep.ops
    sim.result.confirmed = rep.acked
    sim.result.acked = rep.consumed
    sim.result.rewinds = sum(rep.rewind.rewinds.values())
    sim.result.rewound = rep.rewind.reported
    sim.result.copies_allowed = rep.rewind.allowed
    sim.result.copies = rep.rewind.copies
    for failure in rep.failures():
        sim.violation(failure)
    if rep.stored_twice:
        sim.violation(
            f"stored_twice={len(rep.stored_twice)} e.g. {rep.stored_twice[:5]} "
            "(clients never resend a key: the system repeated a send)"
        )
