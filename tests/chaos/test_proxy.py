"""The peer proxy: pass-through, lossless pause per direction, drop with connection resets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.chaos.proxy import Proxy
from tests.ports import free_ports


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[Proxy, int]]:
    target, listen = free_ports(2)
    server = await asyncio.start_server(_echo, "127.0.0.1", target)
    p = Proxy([(1, 2, listen, target)])
    await p.start()
    yield p, listen
    await p.close()
    server.close()


async def _roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), 2)


async def test_pause_holds_bytes_until_heal(proxy: tuple[Proxy, int]) -> None:
    p, port = proxy
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await _roundtrip(reader, writer, b"one") == b"one"
    p.set_blocks({(2, 1): "pause"})  # replies held; requests still reach the echo server
    writer.write(b"two")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(3), 0.3)
    p.set_blocks({})
    assert await asyncio.wait_for(reader.readexactly(3), 2) == b"two"  # nothing lost
    writer.close()


async def test_drop_resets_and_refuses_until_heal(proxy: tuple[Proxy, int]) -> None:
    p, port = proxy
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await _roundtrip(reader, writer, b"x") == b"x"
    p.set_blocks({(1, 2): "drop"})
    assert await asyncio.wait_for(reader.read(10), 2) == b""  # the link was cut
    r2, w2 = await asyncio.open_connection("127.0.0.1", port)
    assert await asyncio.wait_for(r2.read(10), 2) == b""  # refused while cut
    p.set_blocks({})
    r3, w3 = await asyncio.open_connection("127.0.0.1", port)
    assert await _roundtrip(r3, w3, b"back") == b"back"
    for w in (writer, w2, w3):
        w.close()
