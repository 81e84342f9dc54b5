"""Prometheus metrics of the HTTP layer, kept in the application's registry, and the rendering
of a registry for ``GET /metrics`` off the event loop.

The registry is shared: other components of the node register their own collectors in it, and
``GET /metrics`` renders everything it holds: the collectors run on the event loop (they read
live state that only the loop changes), the text is formatted in a worker thread
(`render_registry`), so a large scrape (thousands of queue series) holds the loop, which also
runs Raft, only for the collection. Labels are bounded: ``route`` is the route's
template (``/v1/queues/{name}``), never the concrete path, and requests that match no route are
counted under ``route="unmatched"``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

UNMATCHED_ROUTE = "unmatched"

# Request latencies run from sub-millisecond (health checks) to the 20 s long poll.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    30.0,
)


class HttpMetrics:
    """The HTTP layer's collectors, registered in ``registry`` on construction."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "cmq_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "cmq_http_request_duration_seconds",
            "Time from receiving a request to having its response, by route template and method.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "cmq_http_requests_in_flight",
            "Requests being handled now (long polls included).",
            registry=registry,
        )

        # Labelled children by (route, method, status): looking them up per request is costly.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = (
                self.requests.labels(route, method, str(status)),
                self.latency.labels(route, method),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The registry in Prometheus text format, and its content type (all on this thread)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    async def render_async(self) -> tuple[bytes, str]:
        """As `render`, formatted off the event loop (`render_registry`)."""
        return await render_registry(self.registry), CONTENT_TYPE_LATEST


class _Collected(Collector):
    """Families already collected, yielded again (formatted on another thread: a `Metric`
    is not changed once its collector returned it)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _format(families: list[Metric]) -> bytes:
    frozen = CollectorRegistry()
    frozen.register(_Collected(families))
    return generate_latest(frozen)


async def render_registry(registry: CollectorRegistry) -> bytes:
    """``registry`` in Prometheus text format: collected here (on the event loop), formatted
    in a worker thread."""
    families = list(registry.collect())
    return await asyncio.to_thread(_format, families)


class SharedRender:
    """One rendering of ``registry`` shared by every caller within ``max_age`` seconds (the
    HTTP front ends each ask for the node's metrics; the node renders once for all of them)."""

    def __init__(self, registry: CollectorRegistry, max_age: float = 1.0) -> None:
        self.registry = registry
        self.max_age = max_age
        self._text = b""
        self._at = -float("inf")
        self._lock = asyncio.Lock()

    async def __call__(self) -> bytes:
        async with self._lock:  # callers arriving during a rendering get its result
            if time.monotonic() - self._at >= self.max_age:
                self._text = await render_registry(self.registry)
                self._at = time.monotonic()
            return self._text
