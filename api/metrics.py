"""Prometheus metrics of the HTTP layer, kept in the application's registry.

The registry is shared: other components of the node register their own collectors in it, and
``GET /metrics`` renders everything it holds. Labels are bounded: ``route`` is the route's
template (``/v1/queues/{name}``), never the concrete path, and requests that match no route are
counted under ``route="unmatched"``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

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
        """The registry in Prometheus text format, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
