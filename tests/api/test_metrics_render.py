"""``/metrics`` rendering (`api.metrics`): collectors run on the event loop, the text is
formatted in a worker thread, and `SharedRender` renders once per ``max_age`` for all callers
(the HTTP front ends)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from api.metrics import SharedRender, render_registry


class _Counting(Collector):
    """A collector that records on which thread it ran and how often."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def collect(self) -> Iterator[Metric]:
        self.threads.append(threading.get_ident())
        g = GaugeMetricFamily("cmq_test_queue", "A test series.", labels=["queue"])
        for i in range(500):
            g.add_metric([f"q{i}"], float(i))
        yield g


async def test_collected_on_the_loop_formatted_the_same() -> None:
    registry = CollectorRegistry()
    c = _Counting()
    registry.register(c)
    text = await render_registry(registry)
    assert c.threads == [threading.get_ident()]  # collected on the event loop's thread
    assert text == generate_latest(registry)  # the same exposition as in one go
    assert b'cmq_test_queue{queue="q499"} 499.0' in text


async def test_shared_render_renders_once_per_max_age_for_all_callers() -> None:
    registry = CollectorRegistry()
    c = _Counting()
    registry.register(c)
    shared = SharedRender(registry, max_age=60.0)
    texts = await asyncio.gather(*(shared() for _ in range(5)))
    assert len(set(texts)) == 1 and len(c.threads) == 1
    assert await shared() == texts[0] and len(c.threads) == 1
    fresh = SharedRender(registry, max_age=0.0)
    await fresh()
    await fresh()
    assert len(c.threads) == 3  # no sharing when every rendering is stale at once
