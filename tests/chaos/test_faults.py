"""The fault registry: unavailable kinds are skipped with a reason; partitions cut both ways;
the one-node skeleton keeps a majority running and heals what it did."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.clock import ClockFault
from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import REGISTRY, Pause, resolve, split_blocks


def test_unavailable_kinds_are_skipped_with_a_reason(tmp_path: Path) -> None:
    cluster = ChaosCluster(tmp_path, n=3)  # not started: no LazyFS mount
    said: list[str] = []
    kinds = resolve(["kill", "pause", "partition", "power-loss"], cluster, said.append)
    assert [k.name for k in kinds] == ["kill", "pause", "partition"]
    assert len(said) == 1 and said[0].startswith("skipping fault kind power-loss: ")
    with pytest.raises(SystemExit):
        resolve(["no-such-fault"], cluster, said.append)
    assert set(REGISTRY) >= {"kill", "pause", "partition", "power-loss", "bitflip", "rollback"}


def test_split_blocks_cut_both_directions() -> None:
    blocks = split_blocks([1], [2, 3], "drop")
    assert blocks == {(1, 2): "drop", (2, 1): "drop", (1, 3): "drop", (3, 1): "drop"}


def test_every_node_reaches_its_peers_through_the_proxy(tmp_path: Path) -> None:
    cluster = ChaosCluster(tmp_path, n=3)
    args = cluster.args(2)
    peers = dict(p.split("=") for p in args[args.index("--peers") + 1].split(","))
    assert peers["2"] == f"127.0.0.1:{cluster.peer_port[2]}"  # itself: its own listener
    assert peers["1"] == f"127.0.0.1:{cluster.proxy_port[(2, 1)]}"
    assert peers["3"] == f"127.0.0.1:{cluster.proxy_port[(2, 3)]}"
    assert "--rejoin" in cluster.args(2, rejoin=True)


class _Cluster:
    """What the one-node faults touch of a `ChaosCluster`, recording it."""

    n = 3

    def __init__(self, running: list[int]) -> None:
        self.damaged: set[int] = set()
        self.drift_skew_ms = 0.0
        self.up = running
        self.done: list[tuple[str, int, dict[str, Any]]] = []

    def running(self) -> list[int]:
        return list(self.up)

    async def leaders(self) -> dict[int, int]:
        return {1: self.up[0]}

    def pause(self, nid: int) -> None:
        self.done.append(("pause", nid, {}))

    def resume(self, nid: int) -> None:
        self.done.append(("resume", nid, {}))

    def set_clock(self, nid: int, **how: Any) -> None:
        self.done.append(("clock", nid, how))


def test_one_node_faults_keep_a_majority_and_heal_what_they_did() -> None:
    async def main() -> None:
        cluster: Any = _Cluster([1, 2, 3])
        pause = await Pause().inject(cluster, random.Random(1))
        assert pause is not None and pause.kind == "pause" and pause.at > 0
        (nid,) = pause.nodes
        assert 1.0 <= pause.hold <= 3.0 and cluster.done == [("pause", nid, {})]
        await pause.heal()
        assert cluster.done[-1] == ("resume", nid, {})
        # One of three already down: taking another away would leave no majority running,
        # while a clock fault leaves its node running and still goes ahead.
        cluster = _Cluster([1, 2])
        assert await Pause().inject(cluster, random.Random(1)) is None and cluster.done == []
        clock = await ClockFault().inject(cluster, random.Random(2))
        assert clock is not None and clock.kind in ("clock-jump", "clock-drift")
        await clock.heal()
        assert cluster.done[-1] == ("clock", clock.nodes[0], {})

    asyncio.run(main())
