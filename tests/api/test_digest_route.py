"""``GET /v1/groups/{group}/digest``: the service call it makes, its body and its errors."""

from __future__ import annotations

from tests.api.conftest import Client
from tests.api.recording import RecordingService


async def test_digest_body_and_errors(client: Client, service: RecordingService) -> None:
    resp = await client.get("/v1/groups/1/digest")
    assert resp.status == 200
    body = await resp.json()
    assert body["group"] == 1 and body["applied"] == 10 and body["image_sha256"] == "0" * 64
    assert service.methods() == ["group_digest"] and service.calls[0].args == (1,)
    resp = await client.get("/v1/groups/7/digest")
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "GroupNotFound"
    for bad in ("0", "x", "-1"):
        resp = await client.get(f"/v1/groups/{bad}/digest")
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "InvalidParameter"
    assert len(service.calls) == 2
