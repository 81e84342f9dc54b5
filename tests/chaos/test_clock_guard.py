"""Clock sanity on real processes: a node whose clock jumps an hour ahead while it runs
(``CMQ_CLOCK_FILE``) stops leading within seconds and says so in ``/v1/status`` and
``/metrics``; the cluster keeps serving without a second lease of a leased message; once its
clock is back it is no longer unsafe and may lead again. Also the `cmq.routing.clockfault` file
clock itself (jump, drift, a malformed file ignored)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from cmq.model import QueueAttributes
from cmq.routing.clockfault import FileClock
from tests.chaos.cluster import ChaosCluster


def test_file_clock_jumps_drifts_and_ignores_a_bad_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "clock.json"
    clock = FileClock(str(path))
    assert clock.offset_ms() == 0  # no file: no fault
    path.write_text(json.dumps({"offset_ms": -3_600_000}))
    clock.next_read = 0
    assert clock.offset_ms() == -3_600_000
    path.write_text("{not json")
    clock.next_read = 0
    assert clock.offset_ms() == -3_600_000  # a half-written file changes nothing
    path.write_text(json.dumps({"offset_ms": 0, "drift_ppm": 100_000}))  # 10 % fast
    clock.next_read = 0
    start = clock.offset_ms()
    t0 = time.monotonic()
    time.sleep(0.3)
    gained = clock.offset_ms() - start
    elapsed_ms = (time.monotonic() - t0) * 1000
    assert 0.08 * elapsed_ms <= gained <= 0.12 * elapsed_ms + 5


async def _led_by(cluster: ChaosCluster, nid: int) -> list[int]:
    st = await cluster.status(nid)
    assert st is not None
    return [int(g) for g, info in st["groups"].items() if info["role"] == "leader"]


async def _wait(cond: object, timeout: float, what: str) -> float:
    start = time.monotonic()
    while True:
        if await cond():  # type: ignore[operator]
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not within {timeout} s")
        await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_a_node_an_hour_ahead_stops_leading_and_leads_again_when_back(
    tmp_path: Path,
) -> None:
    cluster = ChaosCluster(tmp_path, n=3, groups=2)
    try:
        await cluster.start()
        # Node 1 is data group 1's preferred leader (`cmq.catalog.placement.preferred_leaders`: 3
        # nodes, 2 groups): the leader balancer gives it group 1 whenever it may lead.
        victim = 1

        async def leads_group_1() -> bool:
            return 1 in await _led_by(cluster, victim)

        await _wait(leads_group_1, 20, "the balancer handing group 1 to node 1")
        others = [n for n in cluster.ids if n != victim]

        cluster.set_clock(victim, offset_ms=3_600_000)

        async def off_and_not_leading() -> bool:
            st = await cluster.status(victim)
            return bool(st and st["clock"]["unsafe"]) and not await _led_by(cluster, victim)

        took = await _wait(off_and_not_leading, 10, "the victim stepping down")
        assert took < 6, f"took {took:.1f} s"

        # Unsafe comes first from the step check (its own monotonic clock); the offset against
        # the peers' median follows with their next probe answers.
        async def offset_seen() -> bool:
            st = await cluster.status(victim)
            return bool(st and st["clock"]["offset_ms"] > 3_500_000)

        await _wait(offset_seen, 10, "the victim's offset against its peers")
        metrics = await cluster.node(victim).request("GET", "/metrics")
        text = metrics.body.decode()
        assert "cmq_clock_unsafe 1.0" in text, text[:2000]

        async def seen_off_by_the_others() -> bool:
            for n in others:
                st = await cluster.status(n)
                if not st or st["clock"]["unsafe"] or victim not in st["clock"]["off_peers"]:
                    return False
            return True

        await _wait(seen_off_by_the_others, 5, "the others naming the victim's clock off")

        # The victim stamps nothing: a send through it carries the leader's time (not an hour
        # ahead); a receive through it is served by a leader elsewhere, one lease per message.
        client = cluster.node(victim, timeout=10)
        await cluster.node(others[0], timeout=10).create_queue("clocked", QueueAttributes())
        await client.send("clocked", [b"one"])
        got = await client.receive("clocked", max_messages=1, visibility_timeout=30)
        assert [m.body for m in got] == [b"one"]
        assert abs(got[0].sent_at_ms - time.time() * 1000) < 30_000, got[0].sent_at_ms
        again = await cluster.node(others[1], timeout=10).receive(
            "clocked", max_messages=1, wait_seconds=1
        )
        assert again == []
        for _ in range(5):  # it stays out while the clock is off
            await asyncio.sleep(0.5)
            assert not await _led_by(cluster, victim)

        cluster.set_clock(victim, offset_ms=0)

        async def back() -> bool:
            st = await cluster.status(victim)
            return bool(st and not st["clock"]["unsafe"])

        await _wait(back, 10, "the clock coming back")

        await _wait(leads_group_1, 30, "the victim leading again")
    finally:
        await cluster.stop()
