"""Helpers of the backup tests: in-process one-node clusters behind the native API (with
request authentication and the key routes), a loaded source cluster, and the comparison of
two clusters' queues, attributes, messages and keys."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestServer

from api.app import make_app
from api.auth.guard import AuthConfig
from cmq.admin.key_admin import KeyAdmin, KeyRing
from cmq.catalog.keys import cluster_credential
from cmq.client import Client
from cmq.client.backup import export_catalog, export_page
from cmq.client.types import Message
from cmq.grants import ADMIN, RECEIVE, SEND, KeyGrant
from cmq.node.config import NodeConfig
from cmq.node.queue_node import QueueNode
from raftlog.transport.peer import Address
from tests.ports import free_ports

SECRET = b"backup-test-cluster-secret-0123456789"


@contextlib.asynccontextmanager
async def api_cluster(
    root: Path, secret: bytes = SECRET
) -> AsyncIterator[tuple[QueueNode, KeyAdmin, Client]]:
    """A one-node cluster with data under ``root`` served over HTTP with authentication, and
    a client signing with the cluster credential (an admin)."""
    address = Address("127.0.0.1", free_ports(1)[0])
    cfg = NodeConfig(
        node_id=1,
        peer=address,
        peers={1: address},
        data_dirs=(str(root),),
        secret=secret,
        groups=2,
        tick_interval=0.02,
    )
    node = QueueNode(cfg)
    await node.start()
    deadline = time.monotonic() + 20
    while not node.is_ready():
        assert time.monotonic() < deadline, "the node did not become ready"
        await asyncio.sleep(0.02)
    keys = KeyAdmin(node.catalog, node.router, secret, node.clock_source.wall_ms)
    app = make_app(node, auth=AuthConfig(KeyRing(node.catalog, secret)), keys=keys)
    server = TestServer(app)
    await server.start_server()
    client = Client(str(server.make_url("")).rstrip("/"), access_key=cluster_credential(secret))
    try:
        yield node, keys, client
    finally:
        await client.close()
        await server.close()
        await node.close()


async def load(client: Client, keys: KeyAdmin | None = None, node: QueueNode | None = None) -> None:
    """A standard queue with a dead-letter queue (attributes set, text and binary bodies,
    message attributes, some in flight, some delayed, one dead-lettered), a FIFO queue with
    groups and one in flight, an empty queue; with ``node`` and ``keys`` (in process) queue
    metadata and an access key."""
    await client.create_queue("orders-dlq", {"message_retention_seconds": 86400})
    await client.create_queue(
        "orders",
        {"visibility_timeout": 60, "dead_letter_queue": "orders-dlq", "max_receive_count": 1},
    )
    await client.create_queue("jobs.fifo", {"fifo": True, "content_based_deduplication": True})
    await client.create_queue("empty", {"delay_seconds": 5})
    await client.send(
        "orders",
        [Message(f"order {i}", attributes={"n": str(i)}) for i in range(40)]
        + [Message(bytes([0, 1, 2, 255]) * 3)],
    )
    await client.send("orders", [Message("later", delay_seconds=600)])
    leased = await client.receive("orders", 5, visibility_timeout=600)
    assert len(leased) == 5
    await client.ack("orders", [leased[0].receipt])
    # One message goes to the dead-letter queue: leased once (max_receive_count 1), released.
    first = await client.receive("orders", 1, visibility_timeout=1)
    await client.nack("orders", [first[0].receipt])
    await client.receive("orders", 1, visibility_timeout=600)  # marks it for the DLQ
    await client.send(
        "jobs.fifo",
        [Message(f"job {i}", group_id=f"g{i % 3}", dedup_id=f"d{i}") for i in range(12)],
    )
    assert len(await client.receive("jobs.fifo", 1, visibility_timeout=600)) == 1
    if node is not None:
        await node.update_metadata("orders", {"team": "billing"}, [])
    if keys is not None:
        await keys.create((KeyGrant("orders*", (RECEIVE, SEND)), KeyGrant("jobs*", (ADMIN,))))
    # The move is a copy to the dead-letter queue, then the delete of the original: wait for
    # both (42 sent, one acked, one moved), so every later snapshot sees the same messages.
    deadline = time.monotonic() + 20
    while True:
        dlq = (await client.get_queue("orders-dlq")).stats
        orders = (await client.get_queue("orders")).stats
        if dlq.visible >= 1 and orders.visible + orders.in_flight + orders.delayed == 40:
            break
        assert time.monotonic() < deadline, f"the dead-letter move did not end: {orders} {dlq}"
        await asyncio.sleep(0.1)


async def snapshot(client: Client) -> dict[str, Any]:
    """What a restore must reproduce: per queue its attributes and its live messages (id,
    body, attributes, FIFO ids) in order; the access keys (sealed) and queue metadata."""
    queues: dict[str, Any] = {}
    for name in await client.list_queues():
        info = await client.get_queue(name)
        messages = []
        after = upto = 0
        while True:
            page = await export_page(client, name, after, upto)
            upto = page["upto"]
            for m in page["messages"]:
                messages.append(
                    (
                        m["id"],
                        m.get("body"),
                        m.get("body_base64"),
                        m["attributes"],
                        m.get("group_id"),
                        m.get("dedup_id"),
                    )
                )
            if page["next_after"] is None:
                break
            after = page["next_after"]
        queues[name] = {"attributes": info.attributes, "messages": messages}
    sections = (await export_catalog(client))["sections"]
    return {"queues": queues, "keys": sections["keys"], "metadata": sections["metadata"]}


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two `snapshot`s (empty: equal)."""
    out = []
    for name in sorted(set(a["queues"]) | set(b["queues"])):
        qa, qb = a["queues"].get(name), b["queues"].get(name)
        if qa is None or qb is None:
            out.append(f"queue {name}: only in {'the second' if qa is None else 'the first'}")
            continue
        if qa["attributes"] != qb["attributes"]:
            out.append(f"queue {name}: attributes {qa['attributes']} != {qb['attributes']}")
        ids_a = [m[0] for m in qa["messages"]]
        ids_b = [m[0] for m in qb["messages"]]
        for mid in sorted(set(ids_a) ^ set(ids_b)):
            out.append(f"queue {name}: message {mid} only in one")
        if qa["messages"] != qb["messages"] and set(ids_a) == set(ids_b):
            out.append(f"queue {name}: messages differ (order, bodies or attributes)")
    if a["keys"] != b["keys"]:
        out.append("access keys differ")
    if a["metadata"] != b["metadata"]:
        out.append("queue metadata differs")
    return out
