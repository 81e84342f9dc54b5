"""The streaming protocol end to end: `StreamClient` against the real app (`api.stream`) over a
one-node `QueueNode`: confirms after commit, pushed deliveries within the granted credit, acks,
errors with the HTTP API's codes, bad frames refused without effect, leases of a vanished
consumer expiring."""

from __future__ import annotations

import asyncio
from typing import cast

import aiohttp
import msgspec
import pytest

from cmq.client import Client, Message
from cmq.client.stream import StreamClient, _Connection
from cmq.errors import InvalidParameter, MessageTooLarge, QueueNotFound
from cmq.stream import STREAM_PATH, Failed, Send, decode_answers, encode
from cmq.stream import Message as WireMessage
from tests.cmq.client.conftest import FaultyService

pytestmark = pytest.mark.asyncio


async def _stats(url: str, queue: str) -> dict[str, int]:
    async with Client(url) as c:
        info = await c.get_queue(queue)
    return {"visible": info.stats.visible, "in_flight": info.stats.in_flight}


async def test_send_subscribe_ack_round_trip(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("s1", {"visibility_timeout": 30})
    async with StreamClient(url) as s:
        sent = await s.send(
            "s1", ["text", b"\x00\xffbinary", Message("with", attributes={"k": "v"})]
        )
        assert [m.seq for m in sent] == sorted({m.seq for m in sent})
        assert len({m.id for m in sent}) == 3
        sub = await s.subscribe("s1", prefetch=10)
        got = []
        while len(got) < 3:
            got += await asyncio.wait_for(sub.next(), 10)
        by_id = {m.id: m for m in got}
        assert by_id[sent[0].id].body == "text"
        assert by_id[sent[1].id].body == b"\x00\xffbinary"
        assert by_id[sent[2].id].attributes == {"k": "v"}
        results = await sub.ack(got)
        assert all(r.ok for r in results)
        await sub.close()
    assert await _stats(url, "s1") == {"visible": 0, "in_flight": 0}


async def test_many_unconfirmed_sends_on_one_connection(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("s2")
    async with StreamClient(url, window=64) as s:
        sent = await asyncio.gather(*(s.send("s2", [f"m{i}"]) for i in range(300)))
    seqs = [m.seq for batch in sent for m in batch]
    assert len(set(seqs)) == 300
    assert (await _stats(url, "s2"))["visible"] == 300


async def test_deliveries_stay_within_the_granted_credit(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("s3", {"visibility_timeout": 60})
        await c.send("s3", [f"m{i}" for i in range(20)])
    async with StreamClient(url) as s:
        sub = await s.subscribe("s3", prefetch=5, max_batch=2)
        got = []
        while len(got) < 5:
            got += await asyncio.wait_for(sub.next(), 10)
        await asyncio.sleep(0.5)  # nothing more arrives without credit
        assert len(got) == 5 and sub._batches.empty()
        assert (await _stats(url, "s3"))["in_flight"] == 5
        await sub.ack(got[:3])  # grants 3 back
        more = []
        while len(more) < 3:
            more += await asyncio.wait_for(sub.next(), 10)
        await asyncio.sleep(0.5)
        assert len(more) == 3 and sub._batches.empty()
        assert {m.body for m in got + more} == {f"m{i}" for i in range(8)}


async def test_errors_carry_the_http_codes(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("s7")
    async with StreamClient(url) as s:
        with pytest.raises(QueueNotFound) as e:
            await s.send("missing", ["x"])
        assert e.value.status == 404  # type: ignore[attr-defined]
        sub = await s.subscribe("missing")
        with pytest.raises(QueueNotFound):
            await asyncio.wait_for(sub.next(), 10)
        # The connection is still usable after both errors; a bad receipt is a per-entry
        # failure, as over HTTP.
        (result,) = await s.ack("s7", ["not-a-receipt"])
        assert not result.ok and result.error
        with pytest.raises(InvalidParameter):
            await s.nack("s7", ["x"], delay_seconds=-1)
        assert len(await s.send("s7", ["fine"])) == 1


async def test_bad_frames_are_refused_and_change_nothing(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("s4")
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(url + STREAM_PATH)
        # A readable id and a body that breaks a limit (delay above the maximum): Failed.
        bad = Send(7, "s4", [WireMessage(b"x", delay_seconds=10**9)])
        good = Send(8, "s4", [WireMessage(b"ok")])
        await ws.send_bytes(encode([bad, good]))
        answers: dict[int, object] = {}
        while len(answers) < 2:
            msg = await asyncio.wait_for(ws.receive(), 10)
            answers.update({a.id: a for a in decode_answers(msg.data)})
        failed = answers[7]
        assert isinstance(failed, Failed) and failed.code == "InvalidParameter"
        assert failed.status == 400
        assert not isinstance(answers[8], Failed)
        # Not MessagePack frames at all: the connection is closed with 1007.
        await ws.send_bytes(b"\xc1 not msgpack")
        msg = await asyncio.wait_for(ws.receive(), 10)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1007
        # Text messages are not the protocol either.
        ws = await http.ws_connect(url + STREAM_PATH)
        await ws.send_str("hello")
        msg = await asyncio.wait_for(ws.receive(), 10)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1003
        # An unknown tag.
        ws = await http.ws_connect(url + STREAM_PATH)
        await ws.send_bytes(msgspec.msgpack.encode([[99, 5, "s4"]]))
        msg = await asyncio.wait_for(ws.receive(), 10)
        (answer,) = decode_answers(msg.data)
        assert isinstance(answer, Failed) and answer.id == 5
        await ws.close()
    assert (await _stats(url, "s4"))["visible"] == 1  # only the good send


async def test_a_vanished_consumers_leases_expire(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("s5", {"visibility_timeout": 1})
        await c.send("s5", ["a", "b"])
    async with StreamClient(url) as s:
        sub = await s.subscribe("s5", prefetch=2)
        got = []
        while len(got) < 2:
            got += await asyncio.wait_for(sub.next(), 10)
    # The client is gone without acking: both come back after the 1 s lease.
    async with Client(url) as c:
        again = await c.receive("s5", 10, wait_seconds=5)
        while len(again) < 2:
            again += await c.receive("s5", 10, wait_seconds=5)
    assert sorted(m.body for m in again) == ["a", "b"]
    assert all(m.receive_count == 2 for m in again)


async def test_a_dropped_connection_fails_requests_in_flight_and_resumes(
    url: str, service: FaultyService
) -> None:
    async with Client(url) as c:
        await c.create_queue("s6")
    gate = asyncio.Event()

    async def hold() -> None:
        await gate.wait()

    async with StreamClient(url, timeout=5) as s:
        sub = await s.subscribe("s6", prefetch=4)
        service.before["send"] = hold
        pending = asyncio.ensure_future(s.send("s6", ["lost?"]))
        await asyncio.sleep(0.2)
        conn = s._conn
        assert conn is not None
        await conn.ws.close()  # the connection drops with the send in flight
        with pytest.raises(Exception) as e:
            await pending
        assert type(e.value).__name__ == "ResponseLost"
        gate.set()
        del service.before["send"]
        # The subscription resumed on a new connection and delivers what is sent next.
        await s.send("s6", ["after"])
        got = []
        while not any(m.body == "after" for m in got):
            got += await asyncio.wait_for(sub.next(), 10)
        await sub.ack(got)
        # The dropped connection's reader and writer both ended (none left pending).
        assert all(t.done() for t in conn.tasks)


class _EndedSocket:
    """A WebSocket the server has closed: its reader ends at once, nothing is ever written."""

    def __aiter__(self) -> _EndedSocket:
        return self

    async def __anext__(self) -> aiohttp.WSMessage:
        await asyncio.sleep(0)
        raise StopAsyncIteration

    async def close(self) -> bool:
        return True


async def test_a_connection_the_server_ended_leaves_no_task_behind() -> None:
    """A node that dies ends the reader; the writer, waiting on the send queue, must end with
    it (a lost connection is dropped by the client, never closed: nothing else would end it)."""
    async with StreamClient("http://127.0.0.1:9", timeout=1) as s:
        conn = _Connection(s, cast(aiohttp.ClientWebSocketResponse, _EndedSocket()), "x")
        await asyncio.wait_for(conn.closed.wait(), 5)
        await asyncio.wait_for(asyncio.gather(*conn.tasks, return_exceptions=True), 5)
        assert all(t.done() for t in conn.tasks)


async def test_fifo_groups_over_the_stream(url: str) -> None:
    async with Client(url) as c:
        await c.create_queue("s8.fifo", {"fifo": True, "visibility_timeout": 30})
    async with StreamClient(url) as s:
        first = await s.send(
            "s8.fifo", [Message(f"a{i}", group_id="a", dedup_id=f"a{i}") for i in range(3)]
        )
        again = await s.send("s8.fifo", [Message("a0", group_id="a", dedup_id="a0")])
        assert again[0] == first[0]  # deduplicated: the original id and seq
        with pytest.raises(InvalidParameter):  # FIFO needs a group id (and refuses it elsewhere)
            await s.send("s8.fifo", [Message("x", dedup_id="x")])
        sub = await s.subscribe("s8.fifo", prefetch=10)
        order: list[str] = []
        while len(order) < 3:
            batch = await asyncio.wait_for(sub.next(), 10)
            assert all(m.group_id == "a" and m.sequence_number == str(m.seq) for m in batch)
            order += [str(m.body) for m in batch]
            await sub.ack(batch)
        assert order == ["a0", "a1", "a2"]


async def test_a_stream_send_is_one_atomic_batch_up_to_one_mebibyte_each(url: str) -> None:
    mib = 1_048_576
    async with Client(url) as c:
        await c.create_queue("atomic")  # the default max_message_size: 1 MiB
        async with StreamClient(url) as s:
            # One refused message refuses the whole Send frame: nothing of it is stored.
            with pytest.raises(MessageTooLarge):
                await s.send("atomic", ["first", b"\x01" * (mib + 1), "third"])
            assert (await c.get_queue("atomic")).stats.visible == 0
            sent = await s.send("atomic", [b"\x02" * mib, "x" * mib, "small"])
            assert [m.seq for m in sent] == sorted(m.seq for m in sent)
        got = await c.receive("atomic", 10)
        assert [(len(m.body), m.body[:1]) for m in got] == [
            (mib, b"\x02"),
            (mib, "x"),
            (5, "s"),
        ]
        # The HTTP API takes ten 1 MiB messages in one send, binary (base64) or text.
        await c.send("atomic", [b"\x03" * mib] * 9 + ["y" * mib])
        with pytest.raises(MessageTooLarge):
            await c.send("atomic", ["ok", "z" * (mib + 1)])
        assert (await c.get_queue("atomic")).stats.visible == 10
