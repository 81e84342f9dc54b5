"""Bad input, endpoint by endpoint: each case gets the expected 4xx status and error code, and
the service is never called (so nothing stored can change). The table is
tests/api/bad_input_table.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from api.app import make_app
from api.decoding import decode
from api.routes import ROUTES
from cmq.errors import InvalidParameter
from tests.api.bad_input_table import QUEUE_ENDPOINTS, M, bad_input_cases
from tests.api.conftest import SMALL_REQUEST_CAP, Client
from tests.api.recording import RecordingService


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), bad_input_cases())
async def test_bad_input_is_refused_before_the_service(
    client: Client,
    service: RecordingService,
    *,
    method: str,
    path: str,
    body: Any,
    status: int,
    code: str,
) -> None:
    data = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
    resp = await client.request(method, path, data=data)
    payload = await resp.json()
    assert (resp.status, payload["error"]["code"]) == (status, code), payload
    assert isinstance(payload["error"]["message"], str)
    assert payload["error"]["message"]
    assert service.calls == []


def test_the_table_covers_every_queue_route() -> None:
    """A new route under /v1/queues/{name} must be added to QUEUE_ENDPOINTS (and so get the
    name, JSON, unknown-field and oversize cases); other path parameters are written as 1."""
    app = make_app(RecordingService())
    routes = {
        (r.method, r.resource.canonical.replace("{first_seq}", "1"))
        for r in app.router.routes()
        if r.resource is not None and "{name}" in r.resource.canonical
    }
    table = {(m, t.format("{name}").split("?")[0]) for m, t, _ in QUEUE_ENDPOINTS}
    assert routes == table


async def test_oversize_chunked_body_without_content_length(
    client: Client, service: RecordingService
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(SMALL_REQUEST_CAP // 1024 + 2):
            yield b"x" * 1024

    resp = await client.post(M, data=chunks())
    assert resp.status == 413
    assert (await resp.json())["error"]["code"] == "RequestTooLarge"
    assert service.calls == []


async def test_body_just_under_the_cap_is_read(client: Client, service: RecordingService) -> None:
    prefix, suffix = b'{"messages":[{"body":"', b'"}]}'
    filler = b"x" * (SMALL_REQUEST_CAP - len(prefix) - len(suffix))
    resp = await client.post(M, data=prefix + filler + suffix)
    assert resp.status == 200
    assert service.methods() == ["send"]


async def test_error_messages_name_the_field(client: Client) -> None:
    body = {"messages": [{"body": "a"}, {"body": "b", "delay_seconds": 604_801}]}
    resp = await client.post(M, json=body)
    assert "messages[1].delay_seconds" in (await resp.json())["error"]["message"]
    resp = await client.post(f"{M}/receive", json={"visbility_timeout": 5})
    assert "visbility_timeout" in (await resp.json())["error"]["message"]


def test_every_refusal_is_explained() -> None:
    """msgspec refuses, the explainer words it: no refusal of the bad-input table falls back to
    msgspec's own message (which would mean the explainer misses a rule of the models)."""
    by_route = {
        (r.method, r.path.replace("{name}", "q").replace("{first_seq}", "1")): r.request
        for r in ROUTES
    }
    checked = 0
    for case in bad_input_cases():
        method, path, body, status, _ = case.values
        model = by_route.get((method, path))
        if model is None or status != 400 or not isinstance(body, dict):
            continue
        try:
            request = decode(orjson.dumps(body), model)
            getattr(request, "to_model", lambda: None)()
        except InvalidParameter as e:
            assert "Expected `" not in e.message and "$." not in e.message, (case.id, e.message)
            checked += 1
    assert checked > 120
