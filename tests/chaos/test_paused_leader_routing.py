"""The 5-node paused-minority stall (docs/chaos.md, "Fixed"): a data group's leader is cut off
in ``pause`` mode (the proxy holds its bytes, connections stay open) while clients keep sending
to that queue through the majority side: through a node that does not host the group (its
router holds a hint naming the cut-off leader) and through a replica. Before the fix every
request through the non-host hung for the whole cut; now each one is answered within ~1.5 s
(the first ones wait out the silence of the old leader, the later ones go straight to the new).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cmq.client import Message
from cmq.errors import CmqError
from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import split_blocks

QUEUE = "stall"
CUT_SECONDS = 6.0
BOUND = 1.5


@pytest.mark.slow
async def test_majority_requests_do_not_stall_behind_a_paused_minority_leader(
    tmp_path: Path,
) -> None:
    cluster = ChaosCluster(tmp_path, n=5, groups=2)
    try:
        await cluster.start()
        client = cluster.node(1, timeout=10)
        await client.create_queue(QUEUE)
        leader = await cluster.leader_of_queue(QUEUE)
        group = await cluster.group_of(QUEUE)
        st = await cluster.status(leader)
        assert st is not None and group is not None
        replicas = st["data_groups"][str(group)]["replicas"]
        non_hosts = [n for n in cluster.ids if n not in replicas]
        replica = next(n for n in replicas if n != leader)
        via = [*non_hosts, replica]
        # Every entry point learns the leader first (the non-hosts keep it as their hint).
        for n in via:
            await cluster.node(n, timeout=5).send(QUEUE, [f"warm-{n}"])

        others = [n for n in cluster.ids if n != leader]
        await cluster.set_blocks(split_blocks([leader], others, "pause"))
        cut = time.monotonic()
        slow: list[str] = []
        latencies: list[float] = []
        failures: list[str] = []
        seq = 0

        async def one(n: int, i: int) -> None:
            start = time.monotonic()
            try:
                await cluster.node(n, timeout=4).send(
                    QUEUE, [Message(body=f"m{i}", dedup_id=f"d{i}")]
                )
            except CmqError as e:
                failures.append(f"send {i} via n{n}: {e}")
            took = time.monotonic() - start
            latencies.append(took)
            if took > BOUND:
                slow.append(f"send {i} via n{n} at +{start - cut:.2f}s took {took:.2f}s")

        tasks: list[asyncio.Task[None]] = []
        while time.monotonic() - cut < CUT_SECONDS:
            for n in via:
                seq += 1
                tasks.append(asyncio.create_task(one(n, seq)))
            await asyncio.sleep(0.2)
        await asyncio.gather(*tasks)
        assert not failures, failures
        assert not slow, slow
        assert len(latencies) >= 3 * len(via)
    finally:
        await cluster.stop()
