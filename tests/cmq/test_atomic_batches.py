"""Atomic batches under a leader kill, on real node processes: every send of several messages
(over HTTP, and a stream `Send` frame) is one Raft entry, so each batch is delivered entirely or
not at all, whichever node dies meanwhile; and nothing confirmed is lost."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator

import pytest

from cmq.client import Client
from cmq.client.stream import StreamClient
from tests.cmq.cluster import CmqCluster, Load, assert_safe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BATCH = 20


class BatchLoad(Load):
    """`Load` with batches of `BATCH` bodies ``<producer>-<batch>-<k>``; producer 0 sends over
    a stream (one `Send` frame per batch), the others over HTTP."""

    def __init__(self, cluster: CmqCluster, queue: str) -> None:
        super().__init__(cluster, queue)
        self.stream = StreamClient(cluster.urls, timeout=15)

    batch = BATCH

    async def _send(self, w: int, bodies: list[str]) -> None:
        if w == 0:
            await self.stream.send(self.queue, bodies)
        else:
            await super()._send(w, bodies)


def partial_batches(received: list[str]) -> dict[str, set[int]]:
    """The batches of which some but not all messages were received."""
    seen: dict[str, set[int]] = defaultdict(set)
    for body in received:
        batch, k = body.rsplit("-", 1)
        seen[batch].add(int(k))
    return {b: ks for b, ks in seen.items() if ks != set(range(BATCH))}


def test_partial_batches_are_found() -> None:
    whole = [f"p1-0-{k}" for k in range(BATCH)]
    assert partial_batches(whole + whole) == {}
    assert partial_batches([*whole, "p1-1-0", "p1-1-3"]) == {"p1-1": {0, 3}}


@pytest.fixture
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CmqCluster]:
    with CmqCluster(tmp_path_factory.mktemp("cmq-atomic"), n=3, groups=1).running() as c:
        yield c


async def test_batches_are_all_or_nothing_through_a_leader_kill(own_cluster: CmqCluster) -> None:
    cluster = own_cluster
    async with Client(cluster.urls) as client:
        await client.create_queue("atomic", {"visibility_timeout": 4})
    load = BatchLoad(cluster, "atomic")
    try:
        await load.start(producers=3, consumers=2)
        await asyncio.sleep(2)
        victim = await cluster.kill_and_restart_leader("atomic", down=3, settle=2)
        out = await load.drain(timeout=120)
    finally:
        await load.stream.close()
    assert_safe(out, f"batches of {BATCH}, leader {victim} killed", confirmed_at_least=200)
    assert partial_batches(out.received) == {}
    assert any(b.startswith("p0-") for b in out.confirmed)  # the stream's batches too
    unconfirmed = {b.rsplit("-", 1)[0] for b in out.attempted - out.confirmed}
    print(f"batches not confirmed around the kill (each delivered whole or not): {unconfirmed}")
