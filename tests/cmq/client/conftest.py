"""A real in-process server for the client tests: the native API app over a one-node
`QueueNode`, on a loopback port, behind a `FaultyService` that can plant failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from api.app import make_app
from cmq.node.queue_node import QueueNode
from cmq.service import SERVICE_METHODS
from tests.cmq.helpers import one_node

Fault = Callable[[], Awaitable[None]]


class FaultyService:
    """The node's `QueueService` with planted faults: ``before[op]`` runs before the call (it
    may raise: the request is refused without effect), ``after[op]`` after it (it may raise or
    sleep: the change is done, the answer is an error or comes late). Counts calls per op."""

    def __init__(self, node: QueueNode) -> None:
        self.node = node
        self.calls: dict[str, int] = {}
        self.before: dict[str, Fault] = {}
        self.after: dict[str, Fault] = {}

    def __getattr__(self, name: str) -> Any:
        if name not in SERVICE_METHODS:  # the service's methods only (cmq.service)
            raise AttributeError(name)
        target = getattr(self.node, name)
        if not asyncio.iscoroutinefunction(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if name in self.before:
                await self.before[name]()
            result = await target(*args, **kwargs)
            if name in self.after:
                await self.after[name]()
            return result

        return call


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[QueueNode]:
    async with one_node(tmp_path / "n1", housekeeping_interval=1.0, tick_interval=0.02) as n:
        yield n


@pytest.fixture
def service(node: QueueNode) -> FaultyService:
    return FaultyService(node)


@pytest.fixture
async def url(service: FaultyService) -> AsyncIterator[str]:
    server = TestServer(make_app(service))  # type: ignore[arg-type]
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()
