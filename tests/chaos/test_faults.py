"""The fault registry: unavailable kinds are skipped with a reason; partitions cut both ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import REGISTRY, resolve, split_blocks


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
