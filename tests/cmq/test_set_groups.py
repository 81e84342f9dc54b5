"""Growing the number of data groups: the catalog's ``groups`` command (pure), and
``cmq cluster set-groups`` on real ``cmq serve`` processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cmq.catalog.meta import MAX_DATA_GROUPS, CatalogMachine, Refused
from cmq.errors import InvalidParameter
from tests.cmq.scalecluster import SECRET, ScaleCluster, until


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count() >= n)


def catalog(nodes: int = 4, groups: int = 3) -> CatalogMachine:
    m = CatalogMachine()
    for n in range(1, nodes + 1):
        m.apply(n, CatalogMachine.register_node(n, f"10.0.0.{n}:1", ["/a", "/b"]))
    m.apply(10, CatalogMachine.init(groups, 3, [1, 2, 3]))
    return m


def test_new_groups_are_placed_balanced_and_take_the_next_queues() -> None:
    m = catalog(nodes=3)
    for i in range(6):
        m.apply(20 + i, CatalogMachine.assign(f"q{i}"))
    before = {q: m.group_of(q) for q in m.names()}
    image = m.snapshot()
    assert m.apply(30, CatalogMachine.set_groups(6)) == [4, 5, 6]
    assert m.data_groups == (1, 2, 3, 4, 5, 6)
    for g in (4, 5, 6):
        p = m.placement(g)
        assert p is not None and len(p.replicas) == 3 and p.founders == p.replicas
        assert not p.moved and p.move is None
        assert {n for n, _ in p.dirs} == set(p.replicas)
    # every node keeps its groups spread over its two data directories
    for n in (1, 2, 3):
        dirs = [m.placement(g).dir_of(n) for g in m.hosted_by(n)]  # type: ignore[union-attr]
        assert sorted(dirs) == [0, 0, 0, 1, 1, 1]
    assert {q: m.group_of(q) for q in before} == before  # existing queues stay
    new = [m.apply(40 + i, CatalogMachine.assign(f"new{i}")) for i in range(3)]
    assert sorted(a.group for a in new) == [4, 5, 6]  # type: ignore[union-attr]
    # idempotent: asking again for as many adds nothing
    assert m.apply(50, CatalogMachine.set_groups(6)) == []
    # deterministic: another replica applying the same log ends with the same image
    other = CatalogMachine()
    other.restore(29, image)
    other.apply(30, CatalogMachine.set_groups(6))
    for i in range(3):
        other.apply(40 + i, CatalogMachine.assign(f"new{i}"))
    other.apply(50, CatalogMachine.set_groups(6))
    assert other.snapshot() == m.snapshot()


def test_new_groups_use_every_active_node_not_only_the_founders() -> None:
    m = catalog(nodes=4, groups=3)
    m.apply(11, CatalogMachine.drain(4))
    assert m.apply(12, CatalogMachine.activate(4)) is True
    added = m.apply(13, CatalogMachine.set_groups(7))
    assert added == [4, 5, 6, 7]
    assert any(4 in m.placement(g).replicas for g in added)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("groups", "code"), [(2, "InvalidParameter"), (MAX_DATA_GROUPS + 1, "InvalidParameter")]
)
def test_shrinking_or_too_many_groups_is_refused_and_changes_nothing(
    groups: int, code: str
) -> None:
    m = catalog()
    image = m.snapshot()
    res = m.apply(20, CatalogMachine.set_groups(groups))
    assert isinstance(res, Refused) and res.code == code
    assert "shrink" in res.message or str(MAX_DATA_GROUPS) in res.message
    assert m.snapshot() == image


def test_set_groups_before_init_is_refused() -> None:
    m = CatalogMachine()
    res = m.apply(1, CatalogMachine.set_groups(4))
    assert isinstance(res, Refused) and res.code == "Unavailable"


async def test_set_groups_on_a_running_cluster(tmp_path: Path) -> None:
    """Three real nodes with 2 groups grow to 4 over HTTP and the CLI: the new groups elect
    leaders on their replicas, new queues land on them, existing queues stay and keep working,
    and shrinking is refused with a clear error."""
    cluster = ScaleCluster(tmp_path, founders=3, spares=0, groups=2)
    try:
        for n in cluster.founders:
            cluster.start(n)
        await cluster.wait_ready(cluster.founders)
        c = cluster.node(1, 10)
        await c.create_queue("old-a")
        await c.create_queue("old-b")
        await c.send_one("old-a", "before")
        placed = {g: info["queues"] for g, info in (await cluster.catalog_groups(1)).items()}
        assert sorted(placed) == ["1", "2"]
        assert await cluster.node(2, 10).set_groups(3) == [3]
        # The CLI, against a third node; idempotent when repeated.
        env = dict(os.environ, CMQ_SECRET=SECRET)
        cmd = [sys.executable, "-m", "cmq", "cluster", "set-groups"]
        out = await asyncio.to_thread(
            subprocess.run,
            [*cmd, "4", "--url", cluster.http[3], "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert '"added"' in out.stdout and "4" in out.stdout
        shrink = await asyncio.to_thread(
            subprocess.run,
            [*cmd, "2", "--url", cluster.http[1]],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shrink.returncode == 1 and "InvalidParameter" in shrink.stdout + shrink.stderr
        with pytest.raises(InvalidParameter):
            await c.set_groups(1)
        assert await c.set_groups(4) == []

        async def new_groups_led() -> bool:
            leaders = await cluster.leaders()
            return 3 in leaders and 4 in leaders

        await until(new_groups_led, 60, "leaders of the new groups 3 and 4")
        for q in ("new-a", "new-b"):
            await c.create_queue(q)
        groups = await cluster.catalog_groups(2)
        assert sorted(groups) == ["1", "2", "3", "4"]
        assert [groups[g]["queues"] for g in ("1", "2", "3", "4")] == [1, 1, 1, 1]
        for g in ("3", "4"):
            assert len(groups[g]["replicas"]) == 3
        # Queues old and new serve sends and receives.
        for q in ("old-a", "new-a", "new-b"):
            await c.send_one(q, f"after-{q}")
        for q, want in [
            ("old-a", ["after-old-a", "before"]),
            ("new-a", ["after-new-a"]),
            ("new-b", ["after-new-b"]),
        ]:
            bodies: list[str] = []
            for _ in range(10):
                got = await cluster.node(3, 10).receive(q, max_messages=10, wait_seconds=1)
                bodies += [str(m.body) for m in got]
                if len(bodies) >= len(want):
                    break
            assert sorted(bodies) == want, (q, bodies)

        async def quiet_groups() -> int:
            text = await cluster.node(1).metrics()
            for fam in text_string_to_metric_families(text):
                if fam.name == "cmq_raft_quiesced_groups":
                    return int(fam.samples[0].value)
            raise AssertionError("no cmq_raft_quiesced_groups metric")

        # At rest the groups (catalog included) quiesce: no heartbeats, no ticks.
        await until(lambda: _at_least(quiet_groups, 5), 60, "the idle groups quiescing")
    finally:
        await cluster.close()
