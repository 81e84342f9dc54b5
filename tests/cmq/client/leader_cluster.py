"""The leader-direct cluster the client tests share: three in-process `QueueNode`s (in-memory
network and disks), each serving the native API on its loopback port with the ``Cmq-Leader``
hint behind a `FaultyService` that counts calls (`Cluster`, the ``cluster`` fixture, with
`QUEUE` created), and `follower_first`, its URLs with a follower of the queue first."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from api.app import make_app
from cmq.cli.launch import free_ports
from cmq.client import Client
from cmq.node.queue_node import QueueNode
from tests.cmq.client.conftest import FaultyService
from tests.cmq.helpers import Twins, configs, running, wait_until

QUEUE = "orders"


@dataclasses.dataclass
class Cluster:
    nodes: dict[int, QueueNode]
    services: dict[int, FaultyService]
    servers: dict[int, TestServer]
    urls: dict[int, str]

    def leader(self) -> int:
        """The queue group's leader: the node that leads it by its own account, else the one
        a node names (a node that has just voted may not know the winner yet), else 0."""
        group = self.nodes[1].router.group_of(QUEUE)
        views = {nid: n.raft.leader_of(group) for nid, n in self.nodes.items()}
        for nid, view in views.items():
            if view == nid:
                return nid
        return next((v for v in views.values() if v), 0)

    def sends(self) -> dict[int, int]:
        return {nid: s.calls.get("send", 0) for nid, s in self.services.items()}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
    cfgs = {
        nid: dataclasses.replace(cfg, http=f"127.0.0.1:{ports[nid]}", balance_leaders=False)
        for nid, cfg in configs(tmp_path).items()
    }
    async with running(cfgs, Twins((1, 2, 3))) as nodes:
        await wait_until(
            lambda: all(
                (info := n.catalog.node_info(m)) is not None and info.http
                for n in nodes.values()
                for m in nodes
            )
        )
        services = {nid: FaultyService(n) for nid, n in nodes.items()}
        servers: dict[int, TestServer] = {}
        try:
            for nid, n in nodes.items():
                app = make_app(services[nid], leader_hint=n.leader_http)  # type: ignore[arg-type]
                servers[nid] = TestServer(app, host="127.0.0.1", port=ports[nid])
                # A stopped server drops its open streams within a second.
                await servers[nid].start_server(shutdown_timeout=1.0)
            urls = {nid: f"http://127.0.0.1:{ports[nid]}" for nid in nodes}
            c = Cluster(nodes, services, servers, urls)
            async with Client(urls[1]) as admin:
                await admin.create_queue(QUEUE)
            yield c
        finally:
            for server in servers.values():
                await server.close()


def follower_first(c: Cluster) -> list[str]:
    """The cluster's URLs, a follower of the queue's group first."""
    lead = c.leader()
    order = [n for n in (1, 2, 3) if n != lead] + [lead]
    return [c.urls[n] for n in order]
