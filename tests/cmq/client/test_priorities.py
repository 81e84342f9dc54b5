"""Message priorities through the Python clients (HTTP and stream) and the CLI against a real
in-process one-node cluster (formed by this release: its feature flags are on)."""

from __future__ import annotations

import asyncio
import json

import pytest

from cmq.cli.main import main
from cmq.client import Client, Message
from cmq.client.stream import StreamClient
from cmq.errors import InvalidParameter

pytestmark = pytest.mark.asyncio


async def test_priorities_through_the_http_client(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("ranked", {"priorities": 3})
        await c.send(
            "ranked",
            ["low", Message("high", priority=2), Message("mid", priority=1), "low 2"],
        )
        with pytest.raises(InvalidParameter, match="priority"):
            await c.send("ranked", ["fine", Message("x", priority=3)])
        info = await c.get_queue("ranked")
        assert info.attributes.priorities == 3
        assert info.stats.sent_total == 4 and info.stats.visible_by_priority == (2, 1, 1)
        got = await c.receive("ranked", 10)
        assert [(m.body, m.priority) for m in got] == [
            ("high", 2),
            ("mid", 1),
            ("low", 0),
            ("low 2", 0),
        ]
        await c.set_attributes("ranked", {"priorities": 1})  # sends at level 0 only from now
        with pytest.raises(InvalidParameter, match="priority"):
            await c.send("ranked", [Message("x", priority=1)])


async def test_priorities_through_the_stream_client(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("ranked-s", {"priorities": 8})
    async with StreamClient(url) as s:
        await s.send("ranked-s", ["plain", Message("urgent", priority=7)])
        with pytest.raises(InvalidParameter, match="priority"):
            await s.send("ranked-s", [Message("x", priority=8)])
    async with Client(url) as c:
        got = await c.receive("ranked-s", 10)
        assert [(m.body, m.priority) for m in got] == [("urgent", 7), ("plain", 0)]


async def test_priorities_through_the_cli(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["queue", "create", "ranked-c", "--priorities", "4", "--url", url, "--json"]
    assert await asyncio.to_thread(main, args) == 0
    assert json.loads(capsys.readouterr().out)["attributes"]["priorities"] == 4
    assert await asyncio.to_thread(main, ["send", "ranked-c", "a", "--url", url]) == 0
    send = ["send", "ranked-c", "b", "--priority", "3", "--url", url]
    assert await asyncio.to_thread(main, send) == 0
    capsys.readouterr()
    receive = ["receive", "ranked-c", "--max", "2", "--url", url, "--json"]
    assert await asyncio.to_thread(main, receive) == 0
    got = json.loads(capsys.readouterr().out)["messages"]
    assert [(m["body"], m.get("priority", 0)) for m in got] == [("b", 3), ("a", 0)]
