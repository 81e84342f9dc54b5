"""/healthz, /readyz, /metrics and /openapi.json."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from api.app import HTTP_METRICS_KEY, MAX_REQUEST_BYTES_KEY, REGISTRY_KEY, SERVICE_KEY, make_app
from api.models import MAX_REQUEST_BYTES
from api.openapi import openapi_document
from tests.api.conftest import Client
from tests.api.recording import RecordingService


async def test_healthz_never_asks_the_service(client: Client, service: RecordingService) -> None:
    service.ready = False
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert await resp.json() == {"status": "ok"}
    assert service.calls == []


async def test_readyz_follows_the_service(client: Client, service: RecordingService) -> None:
    resp = await client.get("/readyz")
    assert (resp.status, await resp.json()) == (200, {"ready": True})
    service.ready = False
    resp = await client.get("/readyz")
    assert (resp.status, await resp.json()) == (503, {"ready": False})
    assert service.methods() == ["is_ready", "is_ready"]


async def test_readyz_is_503_when_the_check_fails(
    client: Client, service: RecordingService
) -> None:
    service.fail["is_ready"] = RuntimeError("catalog not loaded")
    resp = await client.get("/readyz")
    assert (resp.status, await resp.json()) == (503, {"ready": False})


async def test_metrics_count_requests_by_route_template(
    client: Client, registry: CollectorRegistry
) -> None:
    await client.put("/v1/queues/a")
    await client.put("/v1/queues/b")
    await client.get("/v1/queues/bad.name")
    await client.get("/nowhere")
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    text = await resp.text()
    assert (
        'cmq_http_requests_total{method="PUT",route="/v1/queues/{name}",status="201"} 2.0' in text
    )
    assert (
        'cmq_http_requests_total{method="GET",route="/v1/queues/{name}",status="400"} 1.0' in text
    )
    assert 'cmq_http_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
    assert (
        'cmq_http_request_duration_seconds_count{method="PUT",route="/v1/queues/{name}"} 2.0'
        in text
    )
    assert (
        'cmq_http_request_duration_seconds_bucket{le="20.0",method="PUT",route="/v1/queues/{name}"}'
        in text
    )
    assert "cmq_http_requests_in_flight 1.0" in text  # this very request
    # the queue names themselves never become labels
    assert 'route="/v1/queues/a"' not in text
    value = registry.get_sample_value(
        "cmq_http_requests_total", {"route": "/v1/queues/{name}", "method": "PUT", "status": "201"}
    )
    assert value == 2.0


async def test_unknown_methods_share_one_label(client: Client, registry: CollectorRegistry) -> None:
    await client.request("PROPFIND", "/v1/queues")
    assert (
        registry.get_sample_value(
            "cmq_http_requests_total", {"route": "unmatched", "method": "OTHER", "status": "405"}
        )
        == 1.0
    )


async def test_other_collectors_in_the_registry_are_exported(
    client: Client, registry: CollectorRegistry
) -> None:
    raft_commits = Counter("cmq_raft_commits", "Entries committed.", registry=registry)
    raft_commits.inc(5)
    text = await (await client.get("/metrics")).text()
    assert "cmq_raft_commits_total 5.0" in text


async def test_app_keys_expose_the_service_and_registry(
    service: RecordingService, registry: CollectorRegistry
) -> None:
    app = make_app(service, registry=registry)
    assert app[SERVICE_KEY] is service
    assert app[REGISTRY_KEY] is registry
    assert app[HTTP_METRICS_KEY].registry is registry
    assert app[MAX_REQUEST_BYTES_KEY] == MAX_REQUEST_BYTES == 16 * 1024 * 1024


async def test_apps_without_a_registry_do_not_collide() -> None:
    first, second = make_app(RecordingService()), make_app(RecordingService())
    assert first[REGISTRY_KEY] is not second[REGISTRY_KEY]


async def test_openapi_is_served(client: Client) -> None:
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert orjson.loads(await resp.read()) == openapi_document()


async def test_default_cap_refuses_by_content_length_without_reading() -> None:
    """A 16 MiB + 1 byte Content-Length is refused from the headers alone."""
    service = RecordingService()
    async with TestClient(TestServer(make_app(service))) as client:
        assert client.port is not None
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(
            b"POST /v1/queues/q/messages HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {MAX_REQUEST_BYTES + 1}\r\n\r\n".encode()
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
    assert status_line.startswith(b"HTTP/1.1 413")
    assert service.calls == []


async def test_status_renders_the_service_view(client: Client, service: RecordingService) -> None:
    resp = await client.get("/v1/status")
    assert resp.status == 200
    body = await resp.json()
    assert body["node"] == 1 and body["groups"]["0"]["lag"] == {"2": 0, "3": 1}
    assert service.methods() == ["status"]
