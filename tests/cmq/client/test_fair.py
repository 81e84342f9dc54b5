"""Fair queues through the Python clients (HTTP and stream) against a real in-process one-node
cluster (formed by this release: its feature flags are on): a standard queue's group ids name
tenants, a receive spreads over them, a received message carries its group id."""

from __future__ import annotations

import pytest

from cmq.client import Client, Message
from cmq.client.stream import StreamClient
from cmq.errors import InvalidParameter

pytestmark = pytest.mark.asyncio


async def test_tenants_through_the_http_client(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("tenants", {"priorities": 2})
        await c.send("tenants", [Message(f"a{i}", group_id="a") for i in range(20)])
        await c.send("tenants", [Message("b0", group_id="b"), "none", Message("b1", group_id="b")])
        got = await c.receive("tenants", 5)
        # Name order after the cursor: "" (no group id), a, b, then around again.
        assert [(m.body, m.group_id) for m in got] == [
            ("none", None),
            ("a0", "a"),
            ("b0", "b"),
            ("a1", "a"),
            ("b1", "b"),
        ]
        assert all(m.dedup_id is None for m in got)
        with pytest.raises(InvalidParameter, match="priority"):
            await c.send("tenants", [Message("x", group_id="a", priority=1)])
        with pytest.raises(InvalidParameter, match="group_id"):
            await c.send("tenants", [Message("x", group_id="a b")])
        info = await c.get_queue("tenants")
        assert info.stats.sent_total == 23


async def test_tenants_through_the_stream_client(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("tenants-s")
    async with StreamClient(url) as s:
        await s.send("tenants-s", [Message(f"x{i}", group_id="x") for i in range(5)])
        await s.send("tenants-s", [Message("y0", group_id="y")])
    async with Client(url) as c:
        got = await c.receive("tenants-s", 2)
        assert [(m.body, m.group_id) for m in got] == [("x0", "x"), ("y0", "y")]
