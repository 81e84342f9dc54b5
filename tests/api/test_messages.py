"""Happy paths of the message endpoints, including the text / base64 body round trip."""

from __future__ import annotations

import base64

import pytest

from cmq.model import (
    MAX_ACK_BATCH,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
    OutgoingMessage,
    ReceivedMessage,
)
from tests.api.conftest import Client
from tests.api.recording import Call, RecordingService


def received(
    seq: int, body: bytes, *, binary: bool, attributes: tuple[tuple[str, str], ...] = ()
) -> ReceivedMessage:
    return ReceivedMessage(
        id=f"id-{seq}",
        seq=seq,
        body=body,
        binary=binary,
        receipt=f"r-{seq}",
        receive_count=1,
        sent_at_ms=1_700_000_000_123,
        attributes=attributes,
    )


async def test_send_text_message(client: Client, service: RecordingService) -> None:
    resp = await client.post("/v1/queues/q/messages", json={"messages": [{"body": "héllo ✓"}]})
    assert resp.status == 200
    assert await resp.json() == {"messages": [{"id": "m0", "seq": 100}]}
    assert service.calls == [Call("send", ("q", [OutgoingMessage(body="héllo ✓".encode())]))]


async def test_send_every_field(client: Client, service: RecordingService) -> None:
    payload = bytes(range(256))
    resp = await client.post(
        "/v1/queues/q/messages",
        json={
            "messages": [
                {
                    "body_base64": base64.b64encode(payload).decode(),
                    "delay_seconds": 900,
                    "attributes": {"trace": "abc", "k" * 256: ""},
                    "dedup_id": "d" * 128,
                },
                {"body": "", "delay_seconds": 0, "attributes": None, "dedup_id": None},
                {"body": "x", "body_base64": None},
            ]
        },
    )
    assert resp.status == 200
    assert await resp.json() == {
        "messages": [{"id": "m0", "seq": 100}, {"id": "m1", "seq": 101}, {"id": "m2", "seq": 102}]
    }
    [call] = service.calls
    assert call.args == (
        "q",
        [
            OutgoingMessage(
                body=payload,
                binary=True,
                delay_seconds=900,
                attributes=(("trace", "abc"), ("k" * 256, "")),
                dedup_id="d" * 128,
            ),
            OutgoingMessage(body=b"", delay_seconds=0),
            OutgoingMessage(body=b"x"),
        ],
    )


async def test_send_full_batch(client: Client, service: RecordingService) -> None:
    resp = await client.post(
        "/v1/queues/q/messages",
        json={"messages": [{"body": str(i)} for i in range(MAX_SEND_BATCH)]},
    )
    assert resp.status == 200
    assert len((await resp.json())["messages"]) == MAX_SEND_BATCH


async def test_receive_defaults_with_no_body(client: Client, service: RecordingService) -> None:
    resp = await client.post("/v1/queues/q/messages/receive")
    assert resp.status == 200
    assert await resp.json() == {"messages": []}
    assert service.calls == [Call("receive", ("q", 1, None, None))]


async def test_receive_passes_every_parameter(client: Client, service: RecordingService) -> None:
    resp = await client.post(
        "/v1/queues/q/messages/receive",
        json={"max_messages": MAX_RECEIVE_BATCH, "visibility_timeout": 43_200, "wait_seconds": 20},
    )
    assert resp.status == 200
    assert service.calls == [Call("receive", ("q", MAX_RECEIVE_BATCH, 43_200, 20))]


async def test_receive_nulls_mean_defaults(client: Client, service: RecordingService) -> None:
    resp = await client.post(
        "/v1/queues/q/messages/receive",
        json={"max_messages": None, "visibility_timeout": None, "wait_seconds": 0},
    )
    assert resp.status == 200
    assert service.calls == [Call("receive", ("q", 1, None, 0))]


async def test_receive_renders_text_and_binary_bodies(
    client: Client, service: RecordingService
) -> None:
    service.to_receive = [
        received(1, "plain ✓".encode(), binary=False, attributes=(("a", "1"), ("b", "2"))),
        received(2, b"\x00\xff\xfe", binary=True),
        received(3, b"valid utf-8 but sent binary", binary=True),
    ]
    resp = await client.post("/v1/queues/q/messages/receive", json={"max_messages": 10})
    assert resp.status == 200
    assert await resp.json() == {
        "messages": [
            {
                "id": "id-1",
                "seq": 1,
                "body": "plain ✓",
                "receipt": "r-1",
                "receive_count": 1,
                "sent_at": 1_700_000_000_123,
                "attributes": {"a": "1", "b": "2"},
            },
            {
                "id": "id-2",
                "seq": 2,
                "body_base64": "AP/+",
                "receipt": "r-2",
                "receive_count": 1,
                "sent_at": 1_700_000_000_123,
                "attributes": {},
            },
            {
                "id": "id-3",
                "seq": 3,
                "body_base64": base64.b64encode(b"valid utf-8 but sent binary").decode(),
                "receipt": "r-3",
                "receive_count": 1,
                "sent_at": 1_700_000_000_123,
                "attributes": {},
            },
        ]
    }


async def test_text_body_that_is_not_utf8_falls_back_to_base64(
    client: Client, service: RecordingService
) -> None:
    service.to_receive = [received(1, b"\xff", binary=False)]
    resp = await client.post("/v1/queues/q/messages/receive")
    [message] = (await resp.json())["messages"]
    assert message["body_base64"] == "/w=="
    assert "body" not in message


@pytest.mark.parametrize(
    "sent",
    [
        {"body": "text ✓ \u0000 \n"},
        {"body_base64": base64.b64encode(bytes(range(256))).decode()},
        {"body_base64": ""},
    ],
)
async def test_body_round_trip(
    client: Client, service: RecordingService, sent: dict[str, str]
) -> None:
    """What a client sends is what a client receives, in the same field."""
    await client.post("/v1/queues/q/messages", json={"messages": [sent]})
    [outgoing] = service.calls[0].args[1]
    service.to_receive = [received(1, outgoing.body, binary=outgoing.binary)]
    resp = await client.post("/v1/queues/q/messages/receive")
    [message] = (await resp.json())["messages"]
    key = next(iter(sent))
    assert message[key] == sent[key]
    assert {"body", "body_base64"} & message.keys() == {key}


async def test_ack_renders_per_entry_results(client: Client, service: RecordingService) -> None:
    service.bad_receipts = frozenset({"r2"})
    resp = await client.post("/v1/queues/q/messages/ack", json={"receipts": ["r1", "r2"]})
    assert resp.status == 200
    assert await resp.json() == {
        "results": [
            {"receipt": "r1", "ok": True},
            {"receipt": "r2", "ok": False, "error": "LeaseStale"},
        ]
    }
    assert service.calls == [Call("ack", ("q", ["r1", "r2"]))]


async def test_ack_full_batch(client: Client, service: RecordingService) -> None:
    receipts = [f"r{i}" for i in range(MAX_ACK_BATCH)]
    resp = await client.post("/v1/queues/q/messages/ack", json={"receipts": receipts})
    assert resp.status == 200
    assert service.calls == [Call("ack", ("q", receipts))]


async def test_change_visibility(client: Client, service: RecordingService) -> None:
    service.bad_receipts = frozenset({"r1"})
    resp = await client.post(
        "/v1/queues/q/messages/visibility",
        json={
            "entries": [
                {"receipt": "r1", "visibility_timeout": 0},
                {"receipt": "r2", "visibility_timeout": 43_200},
            ]
        },
    )
    assert resp.status == 200
    assert await resp.json() == {
        "results": [
            {"receipt": "r1", "ok": False, "error": "LeaseStale"},
            {"receipt": "r2", "ok": True},
        ]
    }
    assert service.calls == [Call("change_visibility", ("q", [("r1", 0), ("r2", 43_200)]))]


async def test_nack_default_delay(client: Client, service: RecordingService) -> None:
    resp = await client.post("/v1/queues/q/messages/nack", json={"receipts": ["r1"]})
    assert resp.status == 200
    assert await resp.json() == {"results": [{"receipt": "r1", "ok": True}]}
    assert service.calls == [Call("nack", ("q", ["r1"], 0))]


async def test_nack_with_delay(client: Client, service: RecordingService) -> None:
    resp = await client.post(
        "/v1/queues/q/messages/nack", json={"receipts": ["r1", "r2"], "delay_seconds": 900}
    )
    assert resp.status == 200
    assert service.calls == [Call("nack", ("q", ["r1", "r2"], 900))]


async def test_content_type_is_not_required(client: Client, service: RecordingService) -> None:
    # curl -d sends application/x-www-form-urlencoded; the body is still parsed as JSON.
    resp = await client.post(
        "/v1/queues/q/messages",
        data=b'{"messages":[{"body":"x"}]}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert resp.status == 200
    assert service.methods() == ["send"]
