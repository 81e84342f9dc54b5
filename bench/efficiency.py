"""Efficiency figures of a 3-node cmq cluster: records per fsync, CPU seconds per 1,000 messages
per node, resident memory per node with a large backlog, and the backlog's drain rate.

    python bench/efficiency.py [--messages 1000000] [--batch 10] [--url URL,URL,URL]
                               [--protocol http|stream]

Without ``--url`` it starts a fresh local cluster (3 nodes on free loopback ports, a temp data
dir; `cmq.cli.launch`, as `cmq dev` runs them) and stops it at the end. Phases, all against
one queue:

1. produce ``--messages`` 1 KiB messages with `cmq bench` (4 producers x 64 requests in flight,
   ``--batch`` messages per request, no consumers): confirmed msgs/s;
2. read every node's ``/metrics``: resident memory with the backlog in place;
3. drain: 8 receive loops (100 messages per receive) that ack each batch, until the queue is
   empty: consumed-and-acked msgs/s. With ``--protocol stream`` both phases use the streaming
   protocol instead: `cmq bench --protocol stream` produces, and the drain is one subscription
   per node (prefetch 800, batches of up to 100) acking every batch, up to 8 acks in flight.

CPU seconds (``process_cpu_seconds_total``), WAL records and fsyncs are the differences of each
node's counters over each phase. Prints a table, and the same as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cmq.cli.launch import LocalCluster
from cmq.client import Client, SyncClient
from cmq.client.stream import StreamClient

ROOT = Path(__file__).resolve().parent.parent
COUNTERS = (
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "cmq_wal_records_total",
    "cmq_wal_fsyncs_total",
)


def scrape(node: SyncClient) -> dict[str, float]:
    """The `COUNTERS` of one node (summed over label sets)."""
    text = node.metrics()
    out = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in out:
                out[sample.name] += sample.value
    return out


def scrape_all(nodes: list[SyncClient]) -> list[dict[str, float]]:
    return [scrape(n) for n in nodes]


def phase_figures(
    before: list[dict[str, float]], after: list[dict[str, float]], messages: int
) -> dict[str, Any]:
    """Per node: CPU s per 1,000 messages; over the cluster: WAL records per fsync."""
    cpu = [
        (a["process_cpu_seconds_total"] - b["process_cpu_seconds_total"]) * 1000 / messages
        for b, a in zip(before, after, strict=True)
    ]
    records = sum(
        a["cmq_wal_records_total"] - b["cmq_wal_records_total"]
        for b, a in zip(before, after, strict=True)
    )
    fsyncs = sum(
        a["cmq_wal_fsyncs_total"] - b["cmq_wal_fsyncs_total"]
        for b, a in zip(before, after, strict=True)
    )
    return {
        "cpu_s_per_1000_msgs_per_node": [round(c, 4) for c in cpu],
        "records_per_fsync": round(records / fsyncs, 1) if fsyncs else None,
    }


async def drain(urls: list[str], queue: str, loops: int = 8) -> tuple[int, float]:
    """Receive (100 at a time) and ack until the queue is empty; (acked, seconds)."""
    acked = 0
    start = time.perf_counter()
    async with Client(urls, timeout=60) as client:

        async def one(i: int) -> None:
            nonlocal acked
            node = client.derive([urls[i % len(urls)]])
            while True:
                got = await node.receive(queue, 100, visibility_timeout=60, wait_seconds=1)
                if not got:
                    stats = (await client.get_queue(queue)).stats
                    if stats.visible == 0 and stats.in_flight == 0:
                        return
                    continue
                results = await node.ack(queue, [m.receipt for m in got])
                acked += sum(1 for r in results if r.ok)

        await asyncio.gather(*(one(i) for i in range(loops)))
    return acked, time.perf_counter() - start


async def drain_stream(urls: list[str], queue: str, acks_in_flight: int = 8) -> tuple[int, float]:
    """Drain over the streaming protocol: a subscription per node, every delivered batch acked
    (its credit granted back), until the queue is empty; (acked, seconds)."""
    acked = 0
    start = time.perf_counter()
    async with Client(urls, timeout=60) as client:

        async def one(url: str) -> None:
            nonlocal acked
            slots = asyncio.Semaphore(acks_in_flight)
            pending: set[asyncio.Task[None]] = set()
            async with StreamClient([url], timeout=60) as stream:
                sub = await stream.subscribe(
                    queue, prefetch=800, visibility_timeout=60, max_batch=100
                )

                async def ack(got: list[Any]) -> None:
                    nonlocal acked
                    try:
                        results = await sub.ack(got)
                        acked += sum(1 for r in results if r.ok)
                    finally:
                        slots.release()

                while True:
                    try:
                        got = await asyncio.wait_for(sub.next(), 1.0)
                    except TimeoutError:
                        stats = (await client.get_queue(queue)).stats
                        if stats.visible == 0 and stats.in_flight == 0 and not pending:
                            break
                        continue
                    await slots.acquire()
                    task = asyncio.create_task(ack(got))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                await sub.close()
                await asyncio.gather(*pending)

        await asyncio.gather(*(one(u) for u in urls))
    return acked, time.perf_counter() - start


def wait_ready(node: SyncClient, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if node.ready():
            return
        time.sleep(0.5)
    raise SystemExit(f"{node.urls[0]} never became ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--url", help="comma-separated node URLs of a running cluster")
    ap.add_argument("--protocol", choices=["http", "stream"], default="http")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cmq = [sys.executable, "-m", "cmq"]
    dev = None
    if a.url:
        urls = a.url.split(",")
    else:
        dev = LocalCluster(Path(tempfile.mkdtemp(prefix="cmq-eff-")), 3)
        urls = dev.urls
        dev.start()
    nodes = [SyncClient(u, timeout=10) for u in urls]
    try:
        for node in nodes:
            wait_ready(node)
        queue = f"eff-{int(time.time())}"
        before = scrape_all(nodes)
        t0 = time.perf_counter()
        out = subprocess.run(
            [
                *cmq,
                "bench",
                "--url",
                ",".join(urls),
                "--queue",
                queue,
                "--consumers",
                "0",
                "--messages",
                str(a.messages),
                "--batch",
                str(a.batch),
                "--keep-queue",
                "--no-drain",
                "--protocol",
                a.protocol,
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        produce_s = time.perf_counter() - t0
        report = json.loads(out.stdout)
        confirmed = int(report["confirmed"])
        time.sleep(2)  # let followers apply the tail before reading memory
        backlog = scrape_all(nodes)
        drainer = drain_stream if a.protocol == "stream" else drain
        acked, drain_s = asyncio.run(drainer(urls, queue))
        drained = scrape_all(nodes)
        result = {
            "messages": a.messages,
            "batch": a.batch,
            "protocol": a.protocol,
            "confirmed": confirmed,
            "produce_msgs_per_s": report["confirmed_msgs_per_s"],
            "produce_resent_after_errors": report["resent"],
            "produce_errors": report["errors"],
            "produce_wall_s": round(produce_s, 1),
            "produce": phase_figures(before, backlog, max(confirmed, 1)),
            "rss_mib_per_node_with_backlog": [
                round(n["process_resident_memory_bytes"] / 2**20, 1) for n in backlog
            ],
            "drain_acked": acked,
            "drain_s": round(drain_s, 1),
            "drain_msgs_per_s": round(acked / drain_s, 1) if drain_s else None,
            "drain": phase_figures(backlog, drained, max(acked, 1)),
        }
    finally:
        for node in nodes:
            node.close()
        if dev is not None:
            dev.stop(30)
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:32} {v}")
    return 0 if acked >= confirmed else 1


if __name__ == "__main__":
    sys.exit(main())
