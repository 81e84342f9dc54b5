"""FIFO queues through the native API and `cmq.client` (a real node over HTTP): group_id /
dedup_id on send, sequence_number, group order and blocking, content-based dedup, a receive
with an attempt id retried after its answer was lost, and the refused sends."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from cmq.client import Client, Message, RetryPolicy
from cmq.errors import InvalidParameter, MissingParameter

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


def _once(action: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    done = False

    async def hook() -> None:
        nonlocal done
        if not done:
            done = True
            await action()

    return hook


async def test_fifo_send_receive_and_dedup(url: str) -> None:
    async with Client(url) as c:
        created = await c.create_queue("orders.fifo", {"fifo": True})
        assert created.attributes.fifo and not created.attributes.content_based_deduplication
        sent = await c.send(
            "orders.fifo",
            [Message(f"m{i}", group_id="ab"[i % 2], dedup_id=f"d{i}") for i in range(4)],
        )
        again = await c.send("orders.fifo", [Message("other", group_id="a", dedup_id="d0")])
        assert again[0] == sent[0]  # deduplicated: the original's id and seq
        got = await c.receive("orders.fifo", 10, visibility_timeout=30)
        assert [m.body for m in got] == ["m0", "m2", "m1", "m3"]  # group a, then group b
        assert [m.group_id for m in got] == ["a", "a", "b", "b"]
        assert [m.sequence_number for m in got] == [str(sent[i].seq) for i in (0, 2, 1, 3)]
        assert got[0].dedup_id == "d0"
        # Both groups are in flight: nothing more until they are acked.
        await c.send("orders.fifo", [Message("m4", group_id="a", dedup_id="d4")])
        assert await c.receive("orders.fifo", 10, wait_seconds=0) == []
        await c.ack("orders.fifo", [m.receipt for m in got if m.group_id == "a"])
        assert [m.body for m in await c.receive("orders.fifo", 10)] == ["m4"]


async def test_content_dedup_and_refused_sends(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("content.fifo", {"fifo": True, "content_based_deduplication": True})
        one = await c.send("content.fifo", [Message("same", group_id="g")])
        two = await c.send("content.fifo", [Message("same", group_id="h")])
        assert one == two
        got = await c.receive("content.fifo", 10)
        assert got[0].dedup_id == hashlib.sha256(b"same").hexdigest()
        with pytest.raises(MissingParameter) as missing:
            await c.send("content.fifo", ["no group"])
        assert missing.value.status == 400  # type: ignore[attr-defined]
        with pytest.raises(InvalidParameter):
            await c.send("content.fifo", [Message("x", group_id="g", delay_seconds=5)])
        await c.create_queue("plain")
        with pytest.raises(InvalidParameter):  # a group id on a standard queue names a tenant
            await c.send("plain", [Message("x", group_id="g", priority=1)])
        with pytest.raises(InvalidParameter):
            await c.create_queue("plain2.fifo")  # a .fifo name needs fifo=true
        with pytest.raises(InvalidParameter):
            await c.set_attributes("content.fifo", {"fifo": False})


async def test_a_receive_with_an_attempt_id_is_retried_and_gets_the_same(
    url: str, service: Any
) -> None:
    async with Client(url, retry=FAST, timeout=0.5) as c:
        await c.create_queue("retry.fifo", {"fifo": True, "content_based_deduplication": True})
        await c.send("retry.fifo", [Message("a", group_id="g"), Message("b", group_id="g")])

        async def slow() -> None:
            await asyncio.sleep(1.0)

        service.after["receive"] = _once(slow)  # the first answer is lost
        got = await c.receive(
            "retry.fifo", 10, visibility_timeout=30, wait_seconds=0, attempt_id="try-1"
        )
        assert service.calls["receive"] == 2  # retried: the same attempt is safe to repeat
        assert [m.body for m in got] == ["a", "b"]
        acked = await c.ack("retry.fifo", [m.receipt for m in got])
        assert all(r.ok for r in acked)  # the receipts the lost attempt minted are current
