"""`Subscription.ack`'s credit rule: an ack's credit is granted back as the ack is sent (its
`Credit` frame rides in the same WebSocket message as the `Ack`), not after the ack commits;
the ack's answer still comes only once it has committed, and a consumer never holds more
unacknowledged messages than its prefetch."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import msgspec
import pytest

from cmq.client import Client
from cmq.client.stream import StreamClient, Subscription
from cmq.client.types import ReceivedMessage
from cmq.errors import CmqError
from tests.cmq.client.conftest import FaultyService

pytestmark = pytest.mark.asyncio

_ACK, _CREDIT = 5, 3  # request tags (cmq.stream)


async def _in_flight(url: str, queue: str) -> int:
    async with Client(url) as c:
        return (await c.get_queue(queue)).stats.in_flight


async def _take(sub: Subscription, n: int) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    while len(got) < n:
        got += await asyncio.wait_for(sub.next(), 10)
    return got


def _record_frames(s: StreamClient) -> list[list[int]]:
    """The request tags of every WebSocket message the client sends from now on."""
    conn = s._conn
    assert conn is not None
    messages: list[list[int]] = []
    send: Callable[[bytes], Awaitable[None]] = conn.ws.send_bytes

    async def recording(data: bytes, *args: object, **kwargs: object) -> None:
        messages.append([frame[0] for frame in msgspec.msgpack.decode(data)])
        await send(data)

    conn.ws.send_bytes = recording  # type: ignore[method-assign]
    return messages


async def test_an_acks_credit_is_granted_as_it_is_sent_not_when_it_commits(
    url: str, service: FaultyService
) -> None:
    async with Client(url) as c:
        await c.create_queue("cr1", {"visibility_timeout": 60})
        await c.send("cr1", [f"m{i}" for i in range(12)])
    gate = asyncio.Event()

    async def hold() -> None:
        await gate.wait()

    async with StreamClient(url) as s:
        sub = await s.subscribe("cr1", prefetch=4, max_batch=2)
        first = await _take(sub, 4)
        sent = _record_frames(s)
        service.before["ack"] = hold  # the ack is not even proposed until the gate opens
        acking = asyncio.ensure_future(sub.ack(first))
        # Its credit reached the server with it: four more arrive while it is unanswered.
        second = await _take(sub, 4)
        await asyncio.sleep(0.3)
        assert not acking.done()  # the answer waits for the commit
        assert sub._batches.empty()  # the four it holds are its whole prefetch
        assert sub.outstanding == 4
        assert [_ACK, _CREDIT] in sent  # one WebSocket message, the ack first
        gate.set()
        assert all(r.ok for r in await asyncio.wait_for(acking, 10))
        del service.before["ack"]
        assert all(r.ok for r in await sub.ack(second))
        third = await _take(sub, 4)
        assert {m.body for m in first + second + third} == {f"m{i}" for i in range(12)}
        await sub.ack(third)
    assert await _in_flight(url, "cr1") == 0


async def test_credit_never_lets_a_consumer_hold_more_than_its_prefetch(
    url: str, service: FaultyService
) -> None:
    prefetch, total = 7, 150
    async with Client(url) as c:
        await c.create_queue("cr2", {"visibility_timeout": 60})
        for i in range(0, total, 50):
            await c.send("cr2", [f"m{j}" for j in range(i, i + 50)])
    rng = random.Random(29)

    async def slow_commit() -> None:
        await asyncio.sleep(rng.uniform(0, 0.03))

    service.after["ack"] = slow_commit  # answers come late: acks overlap deliveries
    held: list[ReceivedMessage] = []
    most = 0
    seen: set[str] = set()
    acks: set[asyncio.Task[object]] = set()
    async with StreamClient(url) as s:
        sub = await s.subscribe("cr2", prefetch=prefetch, max_batch=3)
        while len(seen) < total:
            batch = await asyncio.wait_for(sub.next(), 10)
            held += batch
            seen |= {m.id for m in batch}
            most = max(most, len(held))
            assert len(held) <= prefetch
            assert sub.outstanding <= prefetch
            # Acknowledge a random part of what is held, sometimes the old way (ack, then grant).
            k = rng.randint(1 if len(held) == prefetch else 0, len(held))  # never stall
            part, held = held[:k], held[k:]
            if part and rng.random() < 0.2:

                async def ack_then_grant(ms: list[ReceivedMessage]) -> object:
                    await s.ack("cr2", [m.receipt for m in ms])
                    await sub.grant(len(ms))
                    return None

                acks.add(asyncio.ensure_future(ack_then_grant(part)))
            elif part:
                acks.add(asyncio.ensure_future(sub.ack(part)))
            await asyncio.sleep(0)
        if held:
            acks.add(asyncio.ensure_future(sub.ack(held)))
        await asyncio.gather(*acks)
        await asyncio.sleep(0.3)
        assert sub._batches.empty()  # nothing left to deliver, nothing delivered twice
    assert len(seen) == total
    assert most == prefetch  # the bound was reached, and never passed
    assert await _in_flight(url, "cr2") == 0


async def test_a_refused_acks_credit_is_not_lost(url: str, service: FaultyService) -> None:
    async with Client(url) as c:
        await c.create_queue("cr3", {"visibility_timeout": 60})
        await c.send("cr3", ["a", "b", "c", "d"])

    async def refuse() -> None:
        raise CmqError("the node is stopping")

    async with StreamClient(url) as s:
        sub = await s.subscribe("cr3", prefetch=2, max_batch=2)
        first = await _take(sub, 2)
        service.before["ack"] = refuse
        with pytest.raises(CmqError):
            await sub.ack(first)
        del service.before["ack"]
        # The refused ack's messages stay leased (they come back after the lease), but the
        # consumer's credit came back with the ack: the next two are delivered.
        second = await _take(sub, 2)
        assert {m.body for m in first + second} == {"a", "b", "c", "d"}
        assert sub.outstanding == 2
        await sub.ack(second)
    assert await _in_flight(url, "cr3") == 2
