"""A front end's leader hint (``cmq serve --http-workers``): the proxy of a follower, serving the
native API as a front-end process does, names the queue's leader in ``Cmq-Leader`` (and in the
stream's answers) from its copy of the node's status, follows a leadership change within a
refresh, and names nothing on the leader; the pure lookup refuses what it cannot read."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from api.app import make_app
from cmq.client.stream import StreamClient
from cmq.frontend.hints import leader_from_status
from cmq.frontend.proxy import ServiceProxy, ServiceServer
from cmq.node.queue_node import QueueNode
from tests.cmq.client.leader_cluster import (  # the fixture is used by name
    QUEUE,
    Cluster,
    cluster,  # noqa: F401
)
from tests.cmq.helpers import wait_until


@contextlib.asynccontextmanager
async def front_end(node: QueueNode, tmp: Path) -> AsyncIterator[tuple[ServiceProxy, str]]:
    """A proxy of ``node`` and the native API on it, with the proxy's hint (as `front_end`)."""
    server = ServiceServer(node, str(tmp / f"fe{node.id}.sock"))
    await server.start()
    proxy = ServiceProxy(server.path)
    http: TestServer | None = None
    try:
        await proxy.connect()
        app = make_app(proxy, leader_hint=proxy.leader_http)  # type: ignore[arg-type]
        http = TestServer(app, host="127.0.0.1")
        await http.start_server(shutdown_timeout=1.0)
        yield proxy, f"http://127.0.0.1:{http.port}"
    finally:
        if http is not None:
            await http.close()
        await proxy.close()
        await server.close()


async def send_hint(url: str) -> str | None:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v1/queues/{QUEUE}/messages", json={"messages": [{"body": "x"}]}) as r,
    ):
        assert r.status == 200, await r.text()
        return r.headers.get("Cmq-Leader")


async def test_a_front_ends_answers_carry_the_leader_hint(
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    lead = cluster.leader()
    follower = next(n for n in (1, 2, 3) if n != lead)
    node = cluster.nodes[follower]
    async with front_end(node, tmp_path) as (proxy, url):
        await wait_until(lambda: proxy.leader_http(QUEUE) != "")
        assert proxy.leader_http(QUEUE) == node.leader_http(QUEUE) == cluster.urls[lead][7:]
        assert proxy.leader_http("no-such-queue") == ""
        assert await send_hint(url) == cluster.urls[lead][7:]
        # The stream over the front end names the leader too: the client moves its sends there.
        async with StreamClient([url, cluster.urls[lead]]) as s:
            await s.send(QUEUE, ["a"])
            before = cluster.services[lead].calls.get("send", 0)
            await s.send(QUEUE, ["b"])
            assert cluster.services[lead].calls.get("send", 0) == before + 1
        # The follower becomes the leader: its front end stops naming another node.
        group = node.router.group_of(QUEUE)
        cluster.nodes[lead].raft.transfer_leader(group, follower)
        await wait_until(
            lambda: all(n.raft.leader_of(group) == follower for n in cluster.nodes.values())
        )
        await wait_until(lambda: proxy.leader_http(QUEUE) == "")
        assert await send_hint(url) is None
    async with front_end(cluster.nodes[lead], tmp_path) as (proxy, url):  # now a follower
        await wait_until(lambda: proxy.leader_http(QUEUE) != "")
        assert await send_hint(url) == cluster.urls[follower][7:]


def test_the_lookup_names_another_nodes_address_or_nothing() -> None:
    status = {
        "node": 1,
        "placement": {"q": 3, "mine": 4, "lost": 5},
        "groups": {"3": {"leader": 2}, "4": {"leader": 1}, "5": {"leader": 0}},
        "nodes": {"1": {"http": "h1:80"}, "2": {"http": "h2:80"}},
    }
    assert leader_from_status(status, "q") == "h2:80"
    assert leader_from_status(status, "mine") == ""  # this node leads
    assert leader_from_status(status, "lost") == ""  # no leader known
    assert leader_from_status(status, "other") == ""
    assert leader_from_status({}, "q") == ""  # no copy yet
    assert leader_from_status(status | {"nodes": {"2": {"http": None}}}, "q") == ""
    assert leader_from_status(status | {"groups": []}, "q") == ""
