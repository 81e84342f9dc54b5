"""`cmq.client` against a real in-process server (the API app over a one-node `QueueNode`):
typed results, error mapping, failover, and which failures are retried — above all that a send
whose outcome is unknown is never resent unless every message carries a dedup id."""

from __future__ import annotations

import asyncio
import base64
import inspect
from typing import Any

import pytest

from cmq.client import (
    UNKNOWN_OUTCOME,
    Client,
    ConnectFailed,
    Message,
    QueueAttributes,
    ResponseLost,
    RetryPolicy,
    SendManyError,
    ServerError,
    SyncClient,
)
from cmq.client.retry import Failure, Safety
from cmq.errors import (
    InvalidParameter,
    MessageTooLarge,
    OutcomeUnknown,
    Overloaded,
    QueueAlreadyExists,
    QueueNotFound,
    TooManyEntries,
    Unavailable,
)

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


def _raise(error: Exception) -> object:
    async def fault() -> None:
        raise error

    return fault


def _sleep(seconds: float) -> object:
    async def fault() -> None:
        await asyncio.sleep(seconds)

    return fault


def _once(fault: object) -> object:
    """``fault`` on the first call only."""
    fired = []

    async def wrapper() -> None:
        if not fired:
            fired.append(True)
            await fault()  # type: ignore[operator]

    return wrapper


async def _stored(c: Client, queue: str) -> int:
    return (await c.get_queue(queue)).stats.sent_total


# -- results ---------------------------------------------------------------------------------------
async def test_queue_and_message_operations_return_typed_results(url: str) -> None:
    async with Client(url) as c:
        created = await c.create_queue("orders", {"visibility_timeout": 5})
        assert created.created and created.attributes == QueueAttributes(visibility_timeout=5)
        again = await c.create_queue("orders", QueueAttributes(visibility_timeout=5))
        assert not again.created
        assert await c.list_queues() == ["orders"]
        attrs = await c.set_attributes("orders", {"delay_seconds": 0, "visibility_timeout": 7})
        assert attrs.visibility_timeout == 7

        sent = await c.send(
            "orders",
            ["text", b"\x00\xff", Message("meta", attributes={"k": "v"}, dedup_id="d-1")],
        )
        assert [m.seq for m in sent] == [1, 2, 3] and all(m.id for m in sent)
        one = await c.send_one("orders", "fourth")
        assert one.seq == 4
        info = await c.get_queue("orders")
        assert info.name == "orders" and info.stats.visible == 4

        got = await c.receive("orders", 10, visibility_timeout=30, wait_seconds=0)
        assert [m.body for m in got] == ["text", b"\x00\xff", "meta", "fourth"]
        assert got[1].data == b"\x00\xff" and got[0].data == b"text"
        assert got[2].attributes == {"k": "v"} and got[0].receive_count == 1
        assert got[0].sent_at_ms > 0 and got[0].receipt

        vis = await c.change_visibility("orders", [(got[0].receipt, 0), ("bogus", 5)])
        assert [(r.ok, r.error) for r in vis] == [(True, None), (False, "ReceiptHandleIsInvalid")]
        nacked = await c.nack("orders", [got[1].receipt])
        assert nacked[0].ok
        acked = await c.ack("orders", [got[2].receipt, got[3].receipt])
        assert [r.ok for r in acked] == [True, True]
        assert (await c.ack_one("orders", got[2].receipt)).ok is False
        back = await c.receive("orders", 10, wait_seconds=0)
        assert sorted(m.seq for m in back) == [1, 2]
        assert [r.ok for r in await c.ack_many("orders", [m.receipt for m in back])] == [True] * 2

        assert await c.send_many("orders", [f"m{i}" for i in range(250)], batch=100)
        assert await c.purge("orders") == 250
        status = await c.status()
        assert set(status["groups"]) == {"0", "1"}
        assert await c.health() and await c.ready()
        assert "cmq_http_requests_total" in await c.metrics()
        await c.delete_queue("orders")
        assert await c.list_queues() == []


async def test_raw_request_returns_any_status(url: str) -> None:
    async with Client(url) as c:
        raw = await c.request("PUT", "/v1/queues/bad%20name!")
        assert raw.status == 400 and raw.payload["error"]["code"] == "InvalidQueueName"
        raw = await c.request("POST", "/v1/queues/x/messages", raw=b"{nope")
        assert raw.status == 400 and raw.payload["error"]["code"] == "InvalidJson"


async def test_the_sync_facade(url: str) -> None:
    def script() -> None:
        with SyncClient(url) as c:
            c.create_queue("sync")
            assert c.send("sync", ["a", "b"])[1].seq == 2
            got = c.receive("sync", 2)
            assert [m.body for m in got] == ["a", "b"]
            assert all(r.ok for r in c.ack("sync", [m.receipt for m in got]))
            with pytest.raises(QueueNotFound):
                c.get_queue("nope")

    await asyncio.to_thread(script)  # its own loop, in a thread; the server runs in this one


def test_the_sync_facade_has_every_client_call() -> None:
    """Each public coroutine method of `Client` is a blocking method of `SyncClient` with the
    same docstring (one line each there: `cmq.client.sync._blocking`); the streaming reads are
    written out."""
    calls = {
        name
        for name, fn in vars(Client).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(fn) and name != "close"
    }
    assert calls and calls <= set(vars(SyncClient)), calls - set(vars(SyncClient))
    for name in calls:
        assert getattr(SyncClient, name).__doc__ == getattr(Client, name).__doc__, name
    assert callable(SyncClient.read_segment)


# -- errors ----------------------------------------------------------------------------------------
async def test_errors_are_the_queue_errors_with_their_http_status(url: str) -> None:
    async with Client(url) as c:
        with pytest.raises(QueueNotFound) as nf:
            await c.get_queue("missing")
        assert isinstance(nf.value, ServerError) and nf.value.status == 404
        assert nf.value.code == "QueueNotFound" and "missing" in nf.value.message
        await c.create_queue("small", {"max_message_size": 1024})
        with pytest.raises(QueueAlreadyExists) as exists:
            await c.create_queue("small")
        assert exists.value.status == 409  # type: ignore[attr-defined]
        with pytest.raises(MessageTooLarge) as big:
            await c.send("small", ["x" * 2000])
        assert big.value.status == 413  # type: ignore[attr-defined]
        with pytest.raises(InvalidParameter) as empty:
            await c.send("small", [])
        assert empty.value.code == "EmptyBatch" and empty.value.status == 400  # type: ignore[attr-defined]
        with pytest.raises(TooManyEntries):
            await c.receive("small", 101)
        with pytest.raises(InvalidParameter) as bad:
            await c.set_attributes("small", {"delay_seconds": 5000})
        assert "delay_seconds" in bad.value.message


async def test_refused_calls_are_retried_and_the_last_refusal_raised(
    url: str, service: Any
) -> None:
    async with Client(url, retry=FAST) as c:
        await c.create_queue("busy")
        service.before["send"] = _once(_raise(Overloaded("full")))
        assert (await c.send("busy", ["a"]))[0].seq == 1
        assert service.calls["send"] == 2
        service.before["receive"] = _raise(Unavailable("no leader"))
        with pytest.raises(Unavailable) as e:
            await c.receive("busy")
        assert service.calls["receive"] == FAST.attempts
        assert e.value.status == 503 and e.value.retry_after == 1.0  # type: ignore[attr-defined]


async def test_failover_to_another_node_when_one_cannot_be_reached(url: str) -> None:
    dead = "http://127.0.0.1:1"  # nothing listens on port 1
    async with Client([dead, url], retry=FAST) as c:
        await c.create_queue("fo")
        assert c.urls[c._http.current] == url  # the next calls start at the node that answered
    async with Client(dead, retry=FAST) as c:
        with pytest.raises(ConnectFailed):
            await c.list_queues()
        assert not await c.ready()


# -- the no-resend rule ----------------------------------------------------------------------------
class ResendEverything(RetryPolicy):
    """A planted bug: retries whatever failed, unknown outcomes of one-shot calls included."""

    def should_retry(self, failure: Failure, safety: Safety, attempt: int) -> bool:
        return attempt < self.attempts and failure is not Failure.DEFINITE


@pytest.mark.parametrize("planted", [False, True])
async def test_a_send_with_an_unknown_outcome_is_not_resent(
    url: str, service: Any, planted: bool
) -> None:
    """The send is stored, then the answer is 503 OutcomeUnknown, or lost (timeout): the
    client raises and does not resend, so it is stored once. With the planted resend it is
    stored twice: the check catches it."""
    policy = ResendEverything(attempts=2, base_delay=0.01) if planted else FAST
    async with Client(url, retry=policy, timeout=1.0) as c:
        await c.create_queue("once")
        service.after["send"] = _once(_raise(OutcomeUnknown("leader changed")))
        outcomes: list[BaseException | None] = []
        try:
            await c.send("once", ["a"])
            outcomes.append(None)
        except UNKNOWN_OUTCOME as e:
            outcomes.append(e)
        service.after["send"] = _once(_sleep(1.5))
        try:
            await c.send("once", [Message("b")])
            outcomes.append(None)
        except UNKNOWN_OUTCOME as e:
            outcomes.append(e)
        await asyncio.sleep(0.6)  # the late answer's handler finishes
        stored = await _stored(c, "once")
    if planted:
        assert stored == 4 and service.calls["send"] == 4
    else:
        assert stored == 2 and service.calls["send"] == 2
        assert isinstance(outcomes[0], OutcomeUnknown) and outcomes[0].status == 503  # type: ignore[attr-defined]
        assert isinstance(outcomes[1], ResponseLost)


async def test_a_send_whose_messages_all_have_dedup_ids_is_resent_once_stored(
    url: str, service: Any
) -> None:
    async with Client(url, retry=FAST) as c:
        await c.create_queue("dedup")
        service.after["send"] = _once(_raise(OutcomeUnknown("leader changed")))
        msgs = [Message("a", dedup_id="a"), Message("b", dedup_id="b")]
        sent = await c.send("dedup", msgs)
        assert service.calls["send"] == 2 and [m.seq for m in sent] == [1, 2]
        assert await _stored(c, "dedup") == 2
        # One message without a dedup id makes the whole request one-shot.
        service.after["send"] = _once(_raise(OutcomeUnknown("leader changed")))
        with pytest.raises(OutcomeUnknown):
            await c.send("dedup", [Message("c", dedup_id="c"), "d"])
        assert service.calls["send"] == 3


async def test_a_receive_is_not_retried_once_sent_but_an_ack_is(url: str, service: Any) -> None:
    async with Client(url, retry=FAST, timeout=0.5) as c:
        await c.create_queue("lease")
        await c.send("lease", ["a", "b"])
        service.after["receive"] = _once(_sleep(1.0))
        with pytest.raises(ResponseLost):
            await c.receive("lease", 1, visibility_timeout=30, wait_seconds=0)
        assert service.calls["receive"] == 1
        await asyncio.sleep(0.6)
        got = await c.receive("lease", 1, visibility_timeout=30, wait_seconds=0)
        assert [m.body for m in got] == ["b"]  # "a" stays leased by the lost answer
        service.after["ack"] = _once(_sleep(1.0))
        results = await c.ack("lease", [got[0].receipt])
        assert service.calls["ack"] == 2
        assert results[0].ok is False  # the first attempt deleted it: the retry says so


async def test_send_many_reports_what_was_confirmed_before_a_failure(
    url: str, service: Any
) -> None:
    async with Client(url, retry=RetryPolicy(attempts=1)) as c:
        await c.create_queue("many")
        calls = []

        async def fail_third() -> None:
            calls.append(1)
            if len(calls) == 3:
                raise Overloaded("full")

        service.before["send"] = fail_third
        with pytest.raises(SendManyError) as e:
            await c.send_many("many", [str(i) for i in range(50)], batch=10)
        assert [m.seq for m in e.value.sent] == list(range(1, 21))  # type: ignore[attr-defined]
        assert isinstance(e.value.cause, Overloaded)


def test_base64_bodies_round_trip_through_the_wire_form() -> None:
    from cmq.client.types import message_json

    assert message_json(b"\x01") == {"body_base64": base64.b64encode(b"\x01").decode()}
    assert message_json(Message("x", delay_seconds=3, dedup_id="i")) == {
        "body": "x",
        "delay_seconds": 3,
        "dedup_id": "i",
    }
