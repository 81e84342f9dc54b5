"""A node that starts with its clock two hours ahead (a VM booted before NTP synced) while
messages are in flight: the queue must drain within seconds once the load stops.

Real processes (`ChaosCluster`, ``CMQ_CLOCK_FILE``): a 3-node cluster, a queue with a 2 s
visibility timeout, producers sending through all three nodes and consumers acking only some of
what they receive. One node of the queue's group (a follower, or the leader) is killed, its
clock set two hours ahead, and started again — there is no earlier reading for a step check to
compare with — and four seconds later its clock is set back. Then the drain: every confirmed
message must come back (leases expire after their visibility) and be acked within
`DRAIN_LIMIT` seconds. Before leaders stamped every send and a restarted clock waited for its
peers' confirmation, half the queue stayed in flight for two hours.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path

import pytest

from cmq.client.types import ReceivedMessage
from cmq.errors import LEASE_STALE, CmqError
from cmq.model import EntryResult, QueueAttributes
from tests.chaos.cluster import ChaosCluster

HOURS_2 = 2 * 3_600_000
DRAIN_LIMIT = 15.0
QUEUE = "clocked"


def _settle(
    messages: list[ReceivedMessage], results: list[EntryResult], acked: set[str], unsure: set[str]
) -> None:
    """Sort an ack's answers: ``ok`` entries are acked; a ``LeaseStale`` entry is unsure — the
    client retries an ack whose reply was lost (a leader killed after the commit), and the
    retry finds the message its first attempt deleted gone, or the message came back and is
    acked later. The drain's stats check counts every one either way."""
    for m, r in zip(messages, results, strict=True):
        if r.ok:
            acked.add(m.id)
        elif r.error == LEASE_STALE:
            unsure.add(m.id)


async def _load(
    cluster: ChaosCluster,
    stop: asyncio.Event,
    confirmed: set[str],
    acked: set[str],
    unsure: set[str],
) -> None:
    """Producers through every node (5 messages per send) and consumers that ack about half
    of what they get (the rest stays leased until its 2 s visibility ends). An ack whose reply
    never came (the node was killed, or the call timed out) may have committed: its ids go to
    `unsure`, never to `acked`."""
    rng = random.Random(7)

    async def produce(nid: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            with contextlib.suppress(CmqError, OSError, asyncio.TimeoutError):
                sent = await cluster.node(nid, timeout=3).send(
                    QUEUE, [f"{nid}-{n}-{i}".encode() for i in range(5)]
                )
                confirmed.update(m.id for m in sent)
            await asyncio.sleep(0.02)

    async def consume(nid: int) -> None:
        while not stop.is_set():
            with contextlib.suppress(CmqError, OSError, asyncio.TimeoutError):
                got = await cluster.node(nid, timeout=3).receive(
                    QUEUE, max_messages=10, visibility_timeout=2, wait_seconds=1
                )
                keep = [m for m in got if rng.random() < 0.5]
                if keep:
                    try:
                        res = await cluster.node(nid, timeout=3).ack(
                            QUEUE, [m.receipt for m in keep]
                        )
                    except (TimeoutError, CmqError, OSError):
                        unsure.update(m.id for m in keep)
                        raise
                    _settle(keep, res, acked, unsure)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(produce(n) for n in cluster.ids), *(consume(n) for n in cluster.ids))


async def _drain(
    cluster: ChaosCluster, confirmed: set[str], acked: set[str], unsure: set[str], leader: int
) -> tuple[float, set[str]]:
    """Receive and ack everything until every confirmed message was acked or was in an ack
    whose reply was lost, and the leader's stats show nothing visible or in flight (a send
    whose reply was lost may have committed too); returns the
    time it took and what is still missing after `DRAIN_LIMIT` seconds."""
    start = time.monotonic()
    nodes = list(cluster.ids)

    async def done() -> bool:
        if not confirmed - acked <= unsure:
            return False
        with contextlib.suppress(CmqError, OSError, asyncio.TimeoutError):
            stats = (await cluster.node(leader, timeout=5).get_queue(QUEUE)).stats
            return stats.visible == 0 and stats.in_flight == 0 and stats.delayed == 0
        return False

    while time.monotonic() - start < DRAIN_LIMIT and not await done():
        nid = nodes[0]
        nodes.append(nodes.pop(0))
        with contextlib.suppress(CmqError, OSError, asyncio.TimeoutError):
            got = await cluster.node(nid, timeout=5).receive(
                QUEUE, max_messages=10, visibility_timeout=30, wait_seconds=1
            )
            if got:
                try:
                    res = await cluster.node(nid, timeout=5).ack(QUEUE, [m.receipt for m in got])
                except (TimeoutError, CmqError, OSError):
                    # The reply was lost, the ack may have committed: as in the load.
                    unsure.update(m.id for m in got)
                    raise
                _settle(got, res, acked, unsure)
    return time.monotonic() - start, confirmed - acked


@pytest.mark.slow
@pytest.mark.parametrize("role", ["follower", "leader"])
async def test_a_node_restarted_two_hours_ahead_does_not_freeze_the_queue(
    tmp_path: Path, role: str
) -> None:
    cluster = ChaosCluster(tmp_path, n=3, groups=1)
    try:
        await cluster.start()
        await cluster.node(1, timeout=10).create_queue(QUEUE, QueueAttributes(visibility_timeout=2))
        leader = await cluster.leader_of_queue(QUEUE)
        victim = leader if role == "leader" else next(n for n in cluster.ids if n != leader)
        confirmed: set[str] = set()
        acked: set[str] = set()
        unsure: set[str] = set()
        stop = asyncio.Event()
        load = asyncio.ensure_future(_load(cluster, stop, confirmed, acked, unsure))
        try:
            await asyncio.sleep(2.0)
            cluster.kill(victim)
            cluster.set_clock(victim, offset_ms=HOURS_2)
            cluster.start_node(victim)
            await asyncio.sleep(6.0)  # its start (a few seconds) and four seconds of the step
            cluster.set_clock(victim, offset_ms=0)
            await asyncio.sleep(1.5)
        finally:
            stop.set()
            await load
        assert len(confirmed) > 200, len(confirmed)
        in_flight = len(confirmed - acked)
        reader = leader if role == "follower" else 1
        took, missing = await _drain(cluster, confirmed, acked, unsure, reader)
        info = await cluster.node(reader, timeout=5).get_queue(QUEUE)
        missing -= unsure  # acked by a call whose reply was lost: the stats below must agree
        assert info.stats.acked_total == info.stats.sent_total >= len(confirmed), info.stats
        assert not missing, (
            f"{len(missing)} of {len(confirmed)} confirmed messages not drained in "
            f"{DRAIN_LIMIT} s; stats {info.stats}"
        )
        assert info.stats.in_flight == 0 and info.stats.visible == 0, info.stats
        print(f"{role}: {len(confirmed)} confirmed, {in_flight} left, drained in {took:.1f} s")
    finally:
        await cluster.stop()
