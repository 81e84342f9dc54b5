"""Growing and shrinking a running cluster of real processes under load.

Three nodes with six data groups serve producers and consumers (the chaos workload, every operation
in a history) the whole time. Nodes 4 and 5 join with ``--join``: every group keeps exactly three
voters, and 4 and 5 take replicas and leaderships. Node 1 is drained (a group's leader is killed in
the middle of its move, and the meta group's leader in the middle of another, each then restarted)
until it holds no replica and leads nothing, then removed. At the end the checker finds nothing
lost, nothing unexpected, nothing delivered again after its ack, and every group's replicas agree.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cmq.errors import CmqError
from tests.chaos.checker import check, check_replicas, same_stats
from tests.chaos.history import History
from tests.chaos.workload import Workload, WorkloadConfig
from tests.cmq.scalecluster import ScaleCluster, until

pytestmark = pytest.mark.slow

QUEUES = ("scale-a", "scale-b", "scale-c")


async def settled(cluster: ScaleCluster, via: int) -> dict[str, Any] | None:
    """The catalog's groups when no move is in flight, every group has three voters and each
    replica's own configuration says so; None otherwise."""
    groups = await cluster.catalog_groups(via)
    if len(groups) != cluster.groups:
        return None
    if any(g["move"] is not None or len(g["replicas"]) != 3 for g in groups.values()):
        return None
    statuses = await cluster.statuses()
    for g, info in groups.items():
        for n in info["replicas"]:
            view = statuses.get(n, {}).get("groups", {}).get(g)
            if view is None or sorted(view["voters"]) != info["replicas"]:
                return None
    return groups


async def test_join_drain_remove_under_load(tmp_path: Path) -> None:
    cluster = ScaleCluster(tmp_path)
    history = History(tmp_path / "history.jsonl")
    urls = {n: cluster.http[n] for n in cluster.founders}
    workload = Workload(urls, history, WorkloadConfig(queues=QUEUES), seed=12, tag="scale")
    try:
        for n in cluster.founders:
            cluster.start(n)
        await cluster.wait_ready(cluster.founders)
        for q in QUEUES:
            await cluster.node(1, 10).create_queue(q)
        await workload.start()
        await asyncio.sleep(2)

        # -- two nodes join ----------------------------------------------------------------------
        cluster.start(4, join=[1])
        cluster.start(5, join=[2, 3])
        await cluster.wait_ready([4, 5])
        urls.update({4: cluster.http[4], 5: cluster.http[5]})

        async def grown() -> dict[str, Any] | None:
            groups = await settled(cluster, 2)
            hosts = {n for g in (groups or {}).values() for n in g["replicas"]}
            return groups if {4, 5} <= hosts else None

        groups = await until(grown, 60, "the groups to spread onto nodes 4 and 5")
        load = {n: sum(n in g["replicas"] for g in groups.values()) for n in cluster.ids}
        assert all(c in (3, 4) for c in load.values()), load  # 18 replicas over 5 nodes

        async def leaders_spread() -> bool:
            leaders = set((await cluster.leaders()).values())
            return 4 in leaders and 5 in leaders

        await until(leaders_spread, 30, "nodes 4 and 5 to lead some groups")

        # -- node 1 is drained; a group's leader dies in the middle of a move ------------------
        del urls[1]
        await cluster.node(2, 10).drain_node(1)

        async def moving(exclude: int = 0) -> tuple[int, int, int] | None:
            """(group, its leader, the meta leader) for a move in flight (not ``exclude``)."""
            via = next(n for n in (2, 3, 4, 5) if n in cluster.procs)
            for g, info in (await cluster.catalog_groups(via)).items():
                if info["move"] is not None and int(g) != exclude:
                    leaders = await cluster.leaders()
                    if int(g) in leaders and 0 in leaders:
                        return int(g), leaders[int(g)], leaders[0]
            return None

        async def restart(victim: int) -> None:
            await asyncio.sleep(1.5)
            cluster.start(victim, join=None if victim <= 3 else [2])
            await cluster.wait_ready([n for n in cluster.procs if n != 1])

        group, victim, _ = await until(moving, 30, "a move in flight", interval=0.05)
        cluster.kill(victim)  # the leader of a group in the middle of its move
        await restart(victim)

        async def another() -> tuple[int, int, int] | None:
            return await moving(exclude=group)

        _, _, meta_leader = await until(another, 30, "another move", interval=0.05)
        cluster.kill(meta_leader)  # the catalog's leader in the middle of another move
        await restart(meta_leader)

        async def drained() -> bool:
            groups = await settled(cluster, 2)
            if groups is None or any(1 in g["replicas"] for g in groups.values()):
                return False
            st = await cluster.status(1)
            return (
                st is not None
                and set(st["groups"]) == {"0"}
                and not any(info["role"] == "leader" for info in st["groups"].values())
            )

        await until(drained, 90, "node 1 to hold no replica and lead nothing")
        rows = await cluster.node(2).list_nodes()
        assert {r["id"]: r["state"] for r in rows}[1] == "draining"

        async def removed() -> bool:
            try:
                await cluster.node(2).remove_node(1)
            except CmqError as e:  # NodeBusy until the meta group let node 1 go
                assert e.code == "NodeBusy", e
                return False
            return True

        await until(removed, 30, "node 1's removal to be accepted")
        cluster.kill(1)

        async def forgotten() -> bool:
            return 1 not in {r["id"] for r in await cluster.node(3).list_nodes()}

        await until(forgotten, 10, "node 3 to forget node 1")

        # -- quiesce and check -------------------------------------------------------------------
        await workload.stop_producers()
        workload.draining = True
        live = sorted(cluster.procs)

        async def empty() -> bool:
            for q in QUEUES:
                stats = await cluster.queue_stats(q, live)
                if len(stats) < len(live) or any(
                    s["visible"] or s["in_flight"] or s["delayed"] for s in stats.values()
                ):
                    return False
            return workload.empty_receives >= 2

        await until(empty, 60, "every queue to be consumed", interval=1.0)
        await workload.stop()

        async def agreeing() -> list[str] | None:
            problems = check_replicas(await cluster.statuses(live))
            return None if problems else ["ok"]

        await until(agreeing, 30, "every group's replicas to agree")
        for q in QUEUES:
            assert same_stats(await cluster.queue_stats(q, live)) == []
    finally:
        await workload.stop()
        await cluster.close()
        history.close()
    report = check(history.ops)
    assert report.acked > 0 and report.consumed > 0
    assert not report.lost and not report.unexpected, report.failures()
    assert not report.redelivered_after_ack, report.failures()
    assert report.ok, report.failures()
