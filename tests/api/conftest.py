from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from api.app import make_app
from tests.api.recording import RecordingService

Client = TestClient[web.Request, web.Application]

SMALL_REQUEST_CAP = 64 * 1024
"""The request cap of the `client` fixture (the default, 16 MiB, is tested separately)."""


@pytest.fixture
def service() -> RecordingService:
    return RecordingService()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def client(service: RecordingService, registry: CollectorRegistry) -> AsyncIterator[Client]:
    app = make_app(service, registry=registry, max_request_bytes=SMALL_REQUEST_CAP)
    async with TestClient(TestServer(app)) as c:
        yield c
