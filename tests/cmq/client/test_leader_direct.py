"""Leader-direct clients against three in-process `QueueNode`s (in-memory network and disks),
each serving the native API on its loopback port with the ``Cmq-Leader`` hint: the client learns
the queue's leader and stops sending through followers, follows a leadership change, falls back
when the leader's node stops answering, never resends a send of unknown outcome, and does not
follow a hint naming an address outside its nodes unless told to."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from api.app import make_app
from cmq.client import Client, ResponseLost, RetryPolicy
from tests.cmq.client.conftest import FaultyService
from tests.cmq.client.leader_cluster import (  # the fixture is used by name
    QUEUE,
    Cluster,
    cluster,  # noqa: F401
    follower_first,
)
from tests.cmq.helpers import wait_until


async def test_sends_go_to_the_leader_once_a_follower_named_it(cluster: Cluster) -> None:  # noqa: F811
    lead = cluster.leader()
    for nid, node in cluster.nodes.items():  # the hint: the leader's catalog address, or none
        assert node.leader_http(QUEUE) == ("" if nid == lead else cluster.urls[lead][7:])
        assert node.leader_http("no-such-queue") == ""
    async with Client(follower_first(cluster)) as c:
        for i in range(30):
            await c.send_one(QUEUE, f"m{i}")
        got = cluster.sends()
        assert got[lead] >= 29
        assert sum(n for nid, n in got.items() if nid != lead) <= 1  # the first, forwarded
    # A client with leader-direct off keeps sending through the follower.
    async with Client(follower_first(cluster), leader_direct=False) as c:
        before = cluster.sends()
        for i in range(10):
            await c.send_one(QUEUE, f"n{i}")
        after = cluster.sends()
        assert after[lead] == before[lead]
    async with Client(cluster.urls[lead]) as c:
        stats = (await c.get_queue(QUEUE)).stats
    assert stats.visible == 40


async def test_a_leadership_change_is_followed(cluster: Cluster) -> None:  # noqa: F811
    old = cluster.leader()
    async with Client(follower_first(cluster)) as c:
        for i in range(5):
            await c.send_one(QUEUE, f"a{i}")
        new = next(n for n in (1, 2, 3) if n != old)
        group = cluster.nodes[old].router.group_of(QUEUE)
        cluster.nodes[old].raft.transfer_leader(group, new)
        await wait_until(
            lambda: all(n.raft.leader_of(group) == new for n in cluster.nodes.values())
        )
        before = cluster.sends()
        for i in range(20):
            await c.send_one(QUEUE, f"b{i}")
        after = cluster.sends()
        assert after[old] - before[old] <= 1  # the stale preference, answered with a hint
        assert after[new] - before[new] >= 19


async def test_a_leader_that_stops_answering_falls_back_to_the_rotation(cluster: Cluster) -> None:  # noqa: F811
    lead = cluster.leader()
    async with Client(follower_first(cluster)) as c:
        await c.send_one(QUEUE, "first")
        await c.send_one(QUEUE, "second")
        assert cluster.sends()[lead] >= 1
        await cluster.servers[lead].close()  # its HTTP is gone; the node still leads
        before = cluster.sends()
        # The pooled connection to the leader may fail mid-write: an unknown outcome, not
        # resent (nothing reached the service here); either way the preference is dropped.
        with contextlib.suppress(ResponseLost):
            await c.send_one(QUEUE, "maybe")
        assert cluster.sends() == before
        for i in range(5):
            await c.send_one(QUEUE, f"c{i}")  # could not connect: sent elsewhere, forwarded
        after = cluster.sends()
        assert sum(after[n] - before[n] for n in (1, 2, 3) if n != lead) == 5


async def test_a_send_of_unknown_outcome_through_the_leader_is_not_resent(
    cluster: Cluster,  # noqa: F811
) -> None:
    lead = cluster.leader()
    async with Client(follower_first(cluster), timeout=1.0, retry=RetryPolicy(attempts=4)) as c:
        await c.send_one(QUEUE, "learn")  # through a follower, which names the leader
        assert cluster.sends()[lead] == 0

        async def lose_answer() -> None:
            await asyncio.sleep(3.0)  # stored, then answered too late: outcome unknown

        cluster.services[lead].after["send"] = lose_answer
        before = cluster.sends()
        with pytest.raises(ResponseLost):
            await c.send_one(QUEUE, "once")
        after = cluster.sends()
        assert after[lead] - before[lead] == 1  # straight to the leader
        assert sum(after.values()) - sum(before.values()) == 1  # one attempt, no resend
        del cluster.services[lead].after["send"]
        await asyncio.sleep(2.5)  # the lost answer's handler finishes
        await c.send_one(QUEUE, "after")  # the preference was dropped; the rotation works
    async with Client(cluster.urls[lead]) as c:
        stats = (await c.get_queue(QUEUE)).stats
    assert stats.visible == 3  # learn, once (stored exactly once), after


async def test_a_hint_outside_the_clients_nodes_is_followed_only_when_allowed(
    tmp_path: Path, url: str, service: FaultyService
) -> None:
    """One node whose hint names another server (an address the client was not given)."""
    hits: list[str] = []

    async def evil(request: web.Request) -> web.Response:
        hits.append(request.path)
        body = {"error": {"code": "Overloaded", "message": "decoy"}}
        return web.json_response(body, status=503)

    decoy = web.Application()
    decoy.router.add_route("*", "/{tail:.*}", evil)
    decoy_server = TestServer(decoy, host="127.0.0.1")
    await decoy_server.start_server()
    planted = f"127.0.0.1:{decoy_server.port}"
    app = make_app(service, leader_hint=lambda _: planted)  # type: ignore[arg-type]
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with Client(base) as c:
            await c.create_queue(QUEUE)
            for i in range(5):
                await c.send_one(QUEUE, f"m{i}")
        assert hits == []
        assert service.calls["send"] == 5
        async with Client(base, leader_any_node=True) as c:
            await c.send_one(QUEUE, "learn")
            await c.send_one(QUEUE, "steered")  # to the decoy first; refused: sent here
            await c.send_one(QUEUE, "again")  # the refusal dropped the decoy; learned anew
        assert hits == [f"/v1/queues/{QUEUE}/messages"] * 2
        assert service.calls["send"] == 8
    finally:
        await server.close()
        await decoy_server.close()
