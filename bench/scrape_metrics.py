"""Scrape cost of the per-queue metrics (`cmq.node.queue_metrics.QueueMetricsCollector`) at
many queues: median time of one ``/metrics`` rendering (`generate_latest`, what the HTTP handler
runs on the event loop) and the exposition's size, with every queue labelled (top = queues)
against the default cap (1000) and a cap of 100. Columns: ``first ms``, the first scrape
(every queue's figures computed); ``scrape ms``, the median of the next ``--rounds`` (idle
queues' figures cached, `cmq.fsm.gauges`); ``bytes``, the exposition; ``read ms``, the
collector's pass over the machines alone (cached).

The node's machines are built in-process: ``--groups`` `QueueMachine`s over in-memory segment
stores, all led by this node (the worst case: one node leading every queue), each queue with
``--messages`` messages of which a fifth are leased (in flight) and one is delayed. With
``--segments`` the segment metrics of the same queues (`SegmentCollector`, capped by the same
settings, the largest on disk) are rendered in the same registry, as ``cmq serve`` does.

    .venv/bin/python bench/scrape_metrics.py [--queues 10000] [--groups 4] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

from prometheus_client import CollectorRegistry, generate_latest

from cmq.fsm import CreateQueue, Lease, MemorySegmentStore, NewMessage, Produce, QueueMachine
from cmq.model import QueueAttributes
from cmq.node.metrics import SegmentCollector
from cmq.node.queue_metrics import QueueMetricsCollector, QueueMetricsSettings

NOW = 1_700_000_000_000


def build(queues: int, groups: int, messages: int) -> dict[int, QueueMachine]:
    machines = {g: QueueMachine(MemorySegmentStore()) for g in range(1, groups + 1)}
    body = b"x" * 100
    for qi in range(queues):
        m = machines[1 + qi % groups]
        name = f"queue-{qi:05d}"
        m.execute(CreateQueue(name, QueueAttributes(), NOW - 60_000))
        batch = tuple(
            NewMessage(f"{qi}-{i}", body, False, (), 30_000 if i == 0 else None, None)
            for i in range(messages + qi % 7)  # unequal depths: top-N has to choose
        )
        m.execute(Produce(name, NOW - 60_000 + qi, batch))
        m.execute(Lease(name, NOW - 30_000, max(1, messages // 5), 120_000))
    return machines


def measure(registry: CollectorRegistry, rounds: int) -> tuple[float, int]:
    """(median seconds, bytes) of rendering ``registry``."""
    times = []
    size = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        size = len(generate_latest(registry))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queues", type=int, default=10_000)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--messages", type=int, default=20, help="per queue (plus 0-6)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--segments", action="store_true", help="the segment metrics too")
    args = p.parse_args()
    rows = []
    for label, top in (("all labelled", args.queues), ("default cap", 1000), ("cap 100", 100)):
        t0 = time.perf_counter()
        machines = build(args.queues, args.groups, args.messages)
        built = time.perf_counter() - t0
        led = set(machines)
        registry = CollectorRegistry()
        collector = QueueMetricsCollector(
            machines, lambda led=led: led, lambda: NOW, QueueMetricsSettings(top=top)
        )
        registry.register(collector)
        if args.segments:
            registry.register(
                SegmentCollector(machines, lambda: NOW, QueueMetricsSettings(top=top))
            )
        t1 = time.perf_counter()
        size = len(generate_latest(registry))  # the first scrape: every queue's figures computed
        cold = time.perf_counter() - t1
        seconds, size = measure(registry, args.rounds)
        t1 = time.perf_counter()
        collector.rows()
        read = time.perf_counter() - t1
        rows.append((label, top, cold, seconds, size, read, built))
    print(f"{args.queues} queues in {args.groups} groups, built in {rows[0][6]:.1f} s")
    print(f"{'case':14} {'top':>6} {'first ms':>9} {'scrape ms':>10} {'bytes':>11} {'read ms':>8}")
    for label, top, cold, seconds, size, read, _ in rows:
        print(
            f"{label:14} {top:>6} {cold * 1000:>9.1f} {seconds * 1000:>10.1f} {size:>11,} "
            f"{read * 1000:>8.1f}"
        )
    base = rows[0][3]
    print("scrape vs all labelled: " + ", ".join(f"{r[0]} {r[3] / base:.2f}" for r in rows[1:]))


if __name__ == "__main__":
    main()
