"""Leader-direct over the streaming protocol: `StreamClient` against three in-process
`QueueNode`s serving the native API (and its stream) with the leader hint (the cluster of
`test_leader_direct`, from `leader_cluster`). Sends and subscriptions move to the queue's leader
once a follower names it, follow a leadership change, fall back when the leader's connection
fails, never resend a send of unknown outcome; hints outside the client's nodes are not followed
unless told; and the hint is a trailing field that a client predating it ignores."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
import pytest
from aiohttp.test_utils import TestServer

from api.app import make_app
from cmq import stream
from cmq.client import Client, ResponseLost
from cmq.client.stream import StreamClient, Subscription
from cmq.client.types import ReceivedMessage
from tests.cmq.client.conftest import FaultyService
from tests.cmq.client.leader_cluster import (  # the fixture is used by name
    QUEUE,
    Cluster,
    cluster,  # noqa: F401
    follower_first,
)
from tests.cmq.helpers import wait_until


def calls(c: Cluster, op: str) -> dict[int, int]:
    return {nid: s.calls.get(op, 0) for nid, s in c.services.items()}


async def take(sub: Subscription, n: int) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    async with asyncio.timeout(10):
        while len(got) < n:
            batch = await sub.next()
            got += batch
            await sub.ack(batch)
    return got


async def test_sends_and_subscriptions_move_to_the_leader(cluster: Cluster) -> None:  # noqa: F811
    lead = cluster.leader()
    others = [n for n in (1, 2, 3) if n != lead]
    async with StreamClient(follower_first(cluster)) as s:
        for i in range(30):
            await s.send(QUEUE, [f"m{i}"])
        sends = calls(cluster, "send")
        assert sends[lead] >= 29
        assert sum(sends[n] for n in others) <= 1  # the first, forwarded, answered with a hint
        sub = await s.subscribe(QUEUE, prefetch=8, max_batch=4)
        got = await take(sub, 30)
        assert sorted(m.body for m in got) == sorted(f"m{i}" for i in range(30))
        assert sub.conn is not None
        assert sub.conn.url == cluster.urls[lead]
        await asyncio.sleep(0.2)  # the follower has ended the old subscription
        before = {op: calls(cluster, op) for op in ("send", "receive", "ack")}
        for i in range(20):
            await s.send(QUEUE, [f"n{i}"])
        assert len(await take(sub, 20)) == 20
        after = {op: calls(cluster, op) for op in ("send", "receive", "ack")}
        for op in ("send", "receive", "ack"):  # nothing more through the followers
            assert all(after[op][n] == before[op][n] for n in others), op
        assert after["ack"][lead] > before["ack"][lead]
    # With leader-direct off, everything keeps going through the follower.
    async with StreamClient(follower_first(cluster), leader_direct=False) as s:
        before_send = calls(cluster, "send")
        for i in range(5):
            await s.send(QUEUE, [f"o{i}"])
        assert calls(cluster, "send")[lead] == before_send[lead]


async def test_a_leadership_change_is_followed(cluster: Cluster) -> None:  # noqa: F811
    old = cluster.leader()
    async with StreamClient(follower_first(cluster)) as s:
        for i in range(5):
            await s.send(QUEUE, [f"a{i}"])
        sub = await s.subscribe(QUEUE, prefetch=8, max_batch=4)
        await take(sub, 5)
        new = next(n for n in (1, 2, 3) if n != old)
        group = cluster.nodes[old].router.group_of(QUEUE)
        cluster.nodes[old].raft.transfer_leader(group, new)
        await wait_until(
            lambda: all(n.raft.leader_of(group) == new for n in cluster.nodes.values())
        )
        before = calls(cluster, "send")
        for i in range(20):
            await s.send(QUEUE, [f"b{i}"])
        after = calls(cluster, "send")
        assert after[old] - before[old] <= 1  # the stale preference, answered with a hint
        assert after[new] - before[new] >= 19
        assert len(await take(sub, 20)) == 20
        await wait_until(lambda: sub.conn is not None and sub.conn.url == cluster.urls[new])


async def test_a_leader_whose_connection_fails_falls_back(cluster: Cluster) -> None:  # noqa: F811
    lead = cluster.leader()
    async with StreamClient(follower_first(cluster), timeout=2.0) as s:
        await s.send(QUEUE, ["first"])
        await s.send(QUEUE, ["second"])
        sub = await s.subscribe(QUEUE, prefetch=8, max_batch=4)
        await take(sub, 2)
        assert calls(cluster, "send")[lead] >= 1
        await cluster.servers[lead].close()  # its HTTP and streams are gone; it still leads
        before = calls(cluster, "send")
        # The connection to the leader may drop with this send on it: an unknown outcome, not
        # resent (nothing reached the service here); either way the preference is dropped.
        maybe = 0
        try:
            await s.send(QUEUE, ["maybe"])
            maybe = 1
        except ResponseLost:
            pass
        assert calls(cluster, "send")[lead] == before[lead]
        for i in range(5):
            await s.send(QUEUE, [f"c{i}"])  # over the first connection, forwarded
        after = calls(cluster, "send")
        assert after[lead] == before[lead]
        assert sum(after[n] - before[n] for n in (1, 2, 3) if n != lead) == 5 + maybe
        got = await take(sub, 5 + maybe)  # the subscription resumed on the first connection
        assert sorted(m.body for m in got) == ["maybe"] * maybe + [f"c{i}" for i in range(5)]


async def test_a_send_of_unknown_outcome_to_the_leader_is_not_resent(
    cluster: Cluster,  # noqa: F811
) -> None:
    lead = cluster.leader()
    async with StreamClient(follower_first(cluster), timeout=1.0) as s:
        await s.send(QUEUE, ["learn"])  # through a follower, which names the leader
        assert calls(cluster, "send")[lead] == 0

        async def lose_answer() -> None:
            await asyncio.sleep(3.0)  # stored, then answered too late: outcome unknown

        cluster.services[lead].after["send"] = lose_answer
        before = calls(cluster, "send")
        with pytest.raises(ResponseLost):
            await s.send(QUEUE, ["once"])
        after = calls(cluster, "send")
        assert after[lead] - before[lead] == 1  # straight to the leader
        assert sum(after.values()) - sum(before.values()) == 1  # one attempt, no resend
        del cluster.services[lead].after["send"]
        await asyncio.sleep(2.5)  # the lost answer's handler finishes
        await s.send(QUEUE, ["after"])
        sub = await s.subscribe(QUEUE, prefetch=8)
        got = await take(sub, 3)
        assert sorted(m.body for m in got) == ["after", "learn", "once"]  # "once" exactly once
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                assert await sub.next() == []  # nothing more arrives


async def test_a_hint_outside_the_clients_nodes_is_followed_only_when_allowed(
    service: FaultyService,
) -> None:
    """One node whose hint names another server (an address the client was not given)."""
    decoy = TestServer(make_app(service), host="127.0.0.1")  # type: ignore[arg-type]
    await decoy.start_server()
    planted = f"127.0.0.1:{decoy.port}"
    server = TestServer(
        make_app(service, leader_hint=lambda _: planted),  # type: ignore[arg-type]
        host="127.0.0.1",
    )
    await server.start_server()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with Client(base) as admin:
            await admin.create_queue(QUEUE)
        async with StreamClient(base) as s:
            for i in range(3):
                await s.send(QUEUE, [f"m{i}"])
            assert not s._direct  # the planted address is not among its URLs
        async with StreamClient(base, leader_any_node=True) as s:
            await s.send(QUEUE, ["learn"])
            await s.send(QUEUE, ["steered"])
            assert list(s._direct) == [f"http://{planted}"]
    finally:
        await server.close()
        await decoy.close()


class OldSent(msgspec.Struct, tag=16, array_like=True):
    id: int
    messages: list[tuple[str, int]]


class OldDeliver(msgspec.Struct, tag=17, array_like=True):
    id: int
    messages: list[stream.Delivered]


def test_the_hint_is_a_trailing_field_old_clients_ignore() -> None:
    old = msgspec.msgpack.Decoder(list[OldSent | OldDeliver])
    hinted = stream.encode([stream.sent(1, [("m", 5)], "10.0.0.2:8080")])
    assert old.decode(hinted) == [OldSent(1, [("m", 5)])]
    assert stream.decode_answers(hinted) == [stream.Sent(1, [("m", 5)], "10.0.0.2:8080")]
    # Without a hint the bytes are those of every release.
    assert stream.encode([stream.sent(1, [("m", 5)], "")]) == msgspec.msgpack.encode(
        [OldSent(1, [("m", 5)])]
    )
    d = stream.Delivered("m", 5, b"x", False, "r", 1, 0, {})
    assert stream.encode([stream.deliver(2, [d], "")]) == msgspec.msgpack.encode(
        [OldDeliver(2, [d])]
    )
    assert old.decode(stream.encode([stream.deliver(2, [d], "h:1")])) == [OldDeliver(2, [d])]
    assert stream.decode_answers(
        stream.encode([stream.results(3, [("r", True, None)], "h:1")])
    ) == [stream.Results(3, [("r", True, None)], "h:1")]
