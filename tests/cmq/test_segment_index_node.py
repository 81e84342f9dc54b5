"""Segment indexes on a real 3-node cluster (in-process `QueueNode`s on loopback, real files):
a cluster formed by this release enables ``segment_index``, and the node hands each group's
store the flag, so every replica writes an index beside each sealed segment at its next
snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from cmq.fsm.segindex import decode_index
from cmq.model import OutgoingMessage, QueueAttributes
from cmq.upgrade import features
from tests.cmq.helpers import wait_until
from tests.cmq.segment_cluster import cluster, leader_of, small_segments


@pytest.mark.slow
async def test_every_replica_indexes_its_sealed_segments(tmp_path: Path) -> None:
    cfgs = small_segments(tmp_path, segment=4096)
    async with cluster(cfgs) as nodes:
        leader = leader_of(nodes)
        assert all(n.catalog.feature_enabled(features.SEGMENT_INDEX) for n in nodes.values())
        await leader.create_queue("indexed", QueueAttributes())
        for i in range(40):
            await leader.send("indexed", [OutgoingMessage(b"m%d " % i + b"x" * 200)] * 5)
        sealed = [
            s.first_seq for s in leader.machines[1].segments("indexed") or [] if s.state == "sealed"
        ]
        assert len(sealed) >= 3
        for i in range(25):  # entries enough for another snapshot (every 20) after the seals
            await leader.send("indexed", [OutgoingMessage(b"more %d" % i)])
        dirs = [Path(c.data_dirs[0]) / "segments" / "g1" / "indexed.1" for c in cfgs.values()]

        def indexed_everywhere() -> bool:
            return all((d / f"{f:020d}.idx").exists() for d in dirs for f in sealed)

        await wait_until(indexed_everywhere, timeout=30)
        for d in dirs:
            for f in sealed:
                index = decode_index((d / f"{f:020d}.idx").read_bytes())
                assert index.first_seq == f
                assert index.size == (d / f"{f:020d}.seg").stat().st_size
