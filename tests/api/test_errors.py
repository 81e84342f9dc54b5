"""How service errors and unexpected failures reach the client."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest

from api.errors import HTTP_STATUS, http_status
from cmq.errors import (
    CmqError,
    InvariantBroken,
    MessageTooLarge,
    OutcomeUnknown,
    Overloaded,
    QueueAlreadyExists,
    QueueNotFound,
    ReceiptInvalid,
    Unavailable,
)
from tests.api.bad_input_table import QUEUE_ENDPOINTS
from tests.api.conftest import Client
from tests.api.recording import RecordingService

SERVICE_METHOD = {
    ("PUT", "/v1/queues/{}"): "create_queue",
    ("GET", "/v1/queues/{}"): "get_queue",
    ("PATCH", "/v1/queues/{}"): "set_attributes",
    ("DELETE", "/v1/queues/{}"): "delete_queue",
    ("POST", "/v1/queues/{}/purge"): "purge",
    ("POST", "/v1/queues/{}/rewind"): "rewind",
    ("POST", "/v1/queues/{}/messages"): "send",
    ("POST", "/v1/queues/{}/messages/receive"): "receive",
    ("POST", "/v1/queues/{}/messages/ack"): "ack",
    ("POST", "/v1/queues/{}/messages/visibility"): "change_visibility",
    ("POST", "/v1/queues/{}/messages/nack"): "nack",
    ("GET", "/v1/queues/{}/messages?peek=1"): "peek",
    ("GET", "/v1/queues/{}/segments"): "list_segments",
    ("GET", "/v1/queues/{}/segments/1/records"): "read_segment",
    ("POST", "/v1/queues/{}/segments/claim"): "claim_segments",
    ("POST", "/v1/queues/{}/segments/archived"): "mark_archived",
    ("GET", "/v1/queues/{}/export?limit=1"): "export_messages",
    ("POST", "/v1/queues/{}/import"): "import_messages",
}


class Throttled(CmqError):
    """An error of a future rate limiter: its status comes from the API's table."""

    code = "Throttled"
    retriable = True
    retry_after = 0.2


async def _error(resp: Any) -> dict[str, str]:
    body = await resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("method", "template", "body"), QUEUE_ENDPOINTS)
async def test_every_queue_route_renders_service_errors(
    client: Client, service: RecordingService, method: str, template: str, body: Any
) -> None:
    service.fail[SERVICE_METHOD[(method, template)]] = QueueNotFound("no queue named 'q'")
    resp = await client.request(method, template.format("q"), json=body)
    assert resp.status == 404
    assert await _error(resp) == {"code": "QueueNotFound", "message": "no queue named 'q'"}
    assert "Retry-After" not in resp.headers
    assert service.methods() == [SERVICE_METHOD[(method, template)]]


@pytest.mark.parametrize(("method", "template", "body"), QUEUE_ENDPOINTS)
async def test_every_queue_route_sets_retry_after_on_503(
    client: Client, service: RecordingService, method: str, template: str, body: Any
) -> None:
    service.fail[SERVICE_METHOD[(method, template)]] = Unavailable("no leader for group 3")
    resp = await client.request(method, template.format("q"), json=body)
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "1"
    assert (await _error(resp))["code"] == "Unavailable"


async def test_list_renders_service_errors(client: Client, service: RecordingService) -> None:
    service.fail["list_queues"] = Overloaded("meta group busy")
    resp = await client.get("/v1/queues")
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "1"
    assert await _error(resp) == {"code": "Overloaded", "message": "meta group busy"}


@pytest.mark.parametrize(
    ("method", "path", "body", "target", "error", "status", "code"),
    [
        (
            "PUT",
            "/v1/queues/q",
            {},
            "create_queue",
            QueueAlreadyExists("q differs"),
            409,
            "QueueAlreadyExists",
        ),
        (
            "POST",
            "/v1/queues/q/messages",
            {"messages": [{"body": "x"}]},
            "send",
            MessageTooLarge("message 0 is 300000 bytes"),
            413,
            "MessageTooLarge",
        ),
        (
            "POST",
            "/v1/queues/q/messages/ack",
            {"receipts": ["r"]},
            "ack",
            ReceiptInvalid("bad receipt"),
            400,
            "ReceiptHandleIsInvalid",
        ),
    ],
)
async def test_service_error_statuses(
    client: Client,
    service: RecordingService,
    *,
    method: str,
    path: str,
    body: Any,
    target: str,
    error: CmqError,
    status: int,
    code: str,
) -> None:
    service.fail[target] = error
    resp = await client.request(method, path, json=body)
    assert resp.status == status
    assert await _error(resp) == {"code": code, "message": error.message}


async def test_retry_after_rounds_up_to_whole_seconds(
    client: Client, service: RecordingService
) -> None:
    error = Overloaded("slow down")
    error.retry_after = 2.1
    service.fail["purge"] = error
    resp = await client.post("/v1/queues/q/purge")
    assert resp.headers["Retry-After"] == "3"


async def test_429_with_retry_after(
    client: Client, service: RecordingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(HTTP_STATUS, Throttled, 429)
    service.fail["receive"] = Throttled("too many receives")
    resp = await client.post("/v1/queues/q/messages/receive")
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "1"
    assert await _error(resp) == {"code": "Throttled", "message": "too many receives"}


async def test_unexpected_exception_is_500_without_details(
    client: Client, service: RecordingService, caplog: pytest.LogCaptureFixture
) -> None:
    service.fail["get_queue"] = RuntimeError("secret path /var/lib/cmq/disk0")
    with caplog.at_level(logging.ERROR, logger="api.app"):
        resp = await client.get("/v1/queues/q")
    assert resp.status == 500
    text = await resp.text()
    assert "secret" not in text
    assert "Traceback" not in text
    assert (await _error(resp))["code"] == "InternalError"
    assert any(r.exc_info and "secret path" in str(r.exc_info[1]) for r in caplog.records)


async def test_internal_cmq_error_message_is_not_shown(
    client: Client, service: RecordingService, caplog: pytest.LogCaptureFixture
) -> None:
    service.fail["send"] = InvariantBroken("group 4: segment 17 bitmap beyond end")
    with caplog.at_level(logging.ERROR, logger="api.app"):
        resp = await client.post("/v1/queues/q/messages", json={"messages": [{"body": "x"}]})
    assert resp.status == 500
    error = await _error(resp)
    assert error["code"] == "InternalError"
    assert "segment" not in error["message"]
    assert any("segment 17" in r.getMessage() for r in caplog.records)


async def test_cancellation_is_not_turned_into_a_response(
    client: Client, service: RecordingService
) -> None:
    """A handler cancelled (client gone) must stay cancelled, not be rendered as a 500."""
    service.fail["receive"] = asyncio.CancelledError()
    with pytest.raises(aiohttp.ClientError):  # the server drops the connection
        await client.post("/v1/queues/q/messages/receive")
    metrics = await (await client.get("/metrics")).text()
    assert 'route="/v1/queues/{name}/messages/receive",status="499"} 1.0' in metrics


async def test_unknown_route_is_a_json_404(client: Client, service: RecordingService) -> None:
    for path in ("/nope", "/v1/queues/q/messages/peek", "/v1/queues/"):
        resp = await client.get(path)
        assert resp.status == 404, path
        assert (await _error(resp))["code"] == "NotFound"
    assert service.calls == []


async def test_wrong_method_is_a_json_405_with_allow(
    client: Client, service: RecordingService
) -> None:
    resp = await client.post("/v1/queues")
    assert resp.status == 405
    assert (await _error(resp))["code"] == "MethodNotAllowed"
    assert resp.headers["Allow"] == "GET"
    resp = await client.get("/v1/queues/q/messages/ack")
    assert resp.status == 405
    assert service.calls == []


class SlowDown(Overloaded):
    code = "SlowDown"


def test_an_unlisted_error_answers_like_its_base_class() -> None:
    assert http_status(SlowDown()) == 503
    assert http_status(OutcomeUnknown()) == 503
    assert http_status(CmqError()) == 500


def test_every_queue_error_has_a_status() -> None:
    """Every error class of `cmq.errors` is listed in the API's status table."""
    import inspect

    import cmq.errors

    classes = {
        cls
        for _, cls in inspect.getmembers(cmq.errors, inspect.isclass)
        if issubclass(cls, CmqError)
    }
    assert classes - set(HTTP_STATUS) == set()


def test_disk_full_is_507_natively_and_service_unavailable_in_sqs() -> None:
    """A send refused under the disk reserve: 507 with its own code in the native API; SQS has
    no such error, so its clients get the 503 ServiceUnavailable they know (and back off)."""
    from api.errors import is_server_fault, render_error
    from api.sqs.errors import ServiceUnavailable, from_cmq
    from cmq.errors import BY_CODE, DiskFull

    err = DiskFull("below the reserve")
    assert http_status(err) == 507 and not err.retriable
    rendered = render_error(err)  # shown as it is: no server fault, nothing hidden
    assert not is_server_fault(err) and b"below the reserve" in rendered.body
    assert BY_CODE["DiskFull"] is DiskFull  # a forwarded refusal keeps its class
    sqs = from_cmq(err)
    assert isinstance(sqs, ServiceUnavailable) and sqs.status == 503
    assert sqs.message.startswith("DiskFull:") and sqs.retry_after == 5.0
