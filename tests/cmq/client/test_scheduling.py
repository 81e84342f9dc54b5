"""Scheduled delivery and times to live through the Python clients (HTTP and stream) against
a real in-process one-node cluster (formed by this release: its feature flags are on)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from cmq.client import Client, Message
from cmq.client.stream import StreamClient
from cmq.errors import InvalidParameter

pytestmark = pytest.mark.asyncio

WEEK = 7 * 86_400


async def test_long_delays_deliver_at_and_ttl_through_the_http_client(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("sched", {"max_delay_seconds": WEEK, "message_retention_seconds": 60})
        soon = datetime.now(UTC) + timedelta(seconds=1.5)
        await c.send(
            "sched",
            [
                Message("week", delay_seconds=6 * 86_400),
                Message("soon", deliver_at=soon),
                Message("past", deliver_at=datetime.now(UTC) - timedelta(days=1)),
                Message("brief", ttl_seconds=1, delay_seconds=2),  # never deliverable
            ],
        )
        with pytest.raises(InvalidParameter, match="max_delay_seconds"):
            await c.send("sched", [Message("x", deliver_at=soon + timedelta(days=8))])
        with pytest.raises(InvalidParameter, match="ttl_seconds"):
            await c.send("sched", [Message("x", ttl_seconds=61)])
        got = await c.receive("sched", 10)
        assert [m.body for m in got] == ["past"]
        await c.ack("sched", [m.receipt for m in got])
        got = await c.receive("sched", 10, wait_seconds=5)
        assert [m.body for m in got] == ["soon"]
        assert datetime.now(UTC) >= soon - timedelta(milliseconds=50)  # node clocks: loopback
        await asyncio.sleep(1.0)
        assert await c.receive("sched", 10) == []  # "brief" expired unseen, "week" waits
        info = await c.get_queue("sched")
        assert info.attributes.max_delay_seconds == WEEK
        assert info.stats.expired_total == 1 and info.stats.delayed == 1


async def test_deliver_at_and_ttl_through_the_stream_client(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("sched-s", {"max_delay_seconds": 3600})
    async with StreamClient(url) as s:
        later = datetime.now(UTC) + timedelta(hours=1)
        await s.send(
            "sched-s", [Message("later", deliver_at=later), "now", Message("t", ttl_seconds=30)]
        )
        with pytest.raises(InvalidParameter, match="max_delay_seconds"):
            await s.send("sched-s", [Message("x", deliver_at=later + timedelta(hours=1))])
    async with Client(url) as c:
        got = await c.receive("sched-s", 10)
        assert sorted(m.body for m in got) == ["now", "t"]
        info = await c.get_queue("sched-s")
        assert info.stats.delayed == 1
