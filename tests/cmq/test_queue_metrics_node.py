"""Per-queue metrics on real nodes: three in-process `QueueNode`s on the in-memory twins, each
with its ``/metrics`` registry as ``cmq serve`` builds it (`register_node_metrics`). Only the
queue's leader exports its series (every node is scraped: a follower exporting fails the
test), with the values the service calls left, a long poll counted while it waits, and the
series following the leadership when it moves. The stream's subscriptions are counted through
the real app (`api.stream` -> `cmq.consumers.Subscriptions`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from api.app import make_app
from cmq.client.stream import StreamClient
from cmq.consumers import Subscriptions
from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.metrics import register_node_metrics
from cmq.node.queue_metrics import QueueMetricsSettings
from cmq.node.queue_node import QueueNode
from tests.cmq.helpers import Twins, configs, one_node, queue_with_follower, running, wait_until

Samples = dict[tuple[str, str], float]


def registry_of(node: QueueNode, subscriptions: Subscriptions | None = None) -> CollectorRegistry:
    registry = CollectorRegistry()
    register_node_metrics(
        registry,
        node.raft,
        node.machines,
        node.clock_source.wall_ms,
        queues=QueueMetricsSettings(),
        waiting=node.wakeups.waiting,
        subscriptions=(subscriptions or Subscriptions()).counts,
    )
    return registry


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("cmq_queue_"):
            for s in family.samples:
                out[(s.name, s.labels.get("queue", ""))] = s.value
    return out


def exporters(registries: dict[int, CollectorRegistry], queue: str) -> dict[int, Samples]:
    """The nodes whose exposition has ``queue``'s visible-messages series, with their samples."""
    out = {}
    for nid, registry in registries.items():
        samples = parse(generate_latest(registry).decode())
        if ("cmq_queue_messages_visible", queue) in samples:
            out[nid] = samples
    return out


async def test_only_the_leader_exports_a_queue_with_the_values_of_the_calls(
    tmp_path: Path,
) -> None:
    async with running(configs(tmp_path), Twins((1, 2, 3))) as nodes:
        registries = {nid: registry_of(n) for nid, n in nodes.items()}
        attrs = QueueAttributes(visibility_timeout=30)
        group, leader, follower = await queue_with_follower(nodes, "q", attrs)

        # Through a follower: every call is forwarded to the leader.
        await follower.send("q", [OutgoingMessage(body=f"m{i}".encode()) for i in range(5)])
        got = await follower.receive("q", 3, None, 0)
        assert len(got) == 3
        await follower.ack("q", [got[0].receipt])
        await follower.nack("q", [got[1].receipt], 0)
        await follower.change_visibility("q", [(got[2].receipt, 0)])
        again = await follower.receive("q", 1, None, 0)
        assert len(again) == 1

        # Every replica applied the same commands; only the leader exports.
        await wait_until(lambda: all(n.machines[group].applied_index > 0 for n in nodes.values()))
        found = exporters(registries, "q")
        assert list(found) == [leader], f"exported by {sorted(found)}, leader {leader}"
        s = found[leader]
        assert s[("cmq_queue_messages_visible", "q")] == 3
        assert s[("cmq_queue_messages_inflight", "q")] == 1
        assert s[("cmq_queue_messages_delayed", "q")] == 0
        assert s[("cmq_queue_sends_total", "q")] == 5
        assert s[("cmq_queue_receives_total", "q")] == 4
        assert s[("cmq_queue_acks_total", "q")] == 1
        assert s[("cmq_queue_nacks_total", "q")] == 2
        assert s[("cmq_queue_bytes", "q")] > 0
        assert s[("cmq_queue_oldest_message_age_seconds", "q")] >= 0
        assert s[("cmq_queue_series_folded", "")] == 0

        # A long poll waits at the leader (forwarded from the follower): counted while it waits.
        await nodes[1].create_queue("empty", QueueAttributes())
        await wait_until(lambda: follower.catalog.group_of("empty") is not None)
        waiter = asyncio.ensure_future(follower.receive("empty", 1, None, 10))

        def waiting() -> bool:
            found = exporters(registries, "empty")
            return any(s[("cmq_queue_consumers_waiting", "empty")] == 1 for s in found.values())

        await wait_until(waiting)
        await follower.send("empty", [OutgoingMessage(body=b"wake")])
        assert len(await asyncio.wait_for(waiter, 10)) == 1
        await wait_until(lambda: not waiting())

        # The leadership moves: the series move with it, still from one node.
        new = next(nid for nid in nodes if nid != leader)
        nodes[leader].raft.transfer_leader(group, new)
        await wait_until(lambda: all(n.raft.leader_of(group) == new for n in nodes.values()))
        found = exporters(registries, "q")
        assert list(found) == [new]
        assert found[new][("cmq_queue_messages_visible", "q")] == 3
        assert found[new][("cmq_queue_sends_total", "q")] == 5  # replicated
        assert found[new][("cmq_queue_receives_total", "q")] == 4  # counted as it applied


async def test_stream_subscriptions_are_counted_as_waiting_consumers(tmp_path: Path) -> None:
    subs = Subscriptions()
    async with one_node(tmp_path / "n1", housekeeping_interval=1.0) as node:
        registry = registry_of(node, subs)
        server = TestServer(make_app(node, registry=registry, subscriptions=subs))
        await server.start_server()
        url = str(server.make_url("")).rstrip("/")
        try:
            await node.create_queue("s", QueueAttributes())
            async with StreamClient(url) as client:
                first = await client.subscribe("s", prefetch=1)
                await client.subscribe("s", prefetch=1)
                await wait_until(lambda: subs.counts() == {"s": 2})
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(f"{url}/metrics") as answer,
                ):
                    samples = parse(await answer.text())
                # Two subscriptions, plus the receive loops long-polling now (credit 1 each).
                assert 2 <= samples[("cmq_queue_consumers_waiting", "s")] <= 4
                await first.close()
                await wait_until(lambda: subs.counts() == {"s": 1})
            # The connection ended without an unsubscribe: its subscription is gone too.
            await wait_until(lambda: subs.counts() == {})
        finally:
            await server.close()
