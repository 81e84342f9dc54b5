"""Scale figures of cmq (a benchmark, not a test; results go to bench/RESULTS.md).

    python bench/scale_bench.py catalog              10,000 queues in the catalog (in process)
    python bench/scale_bench.py queues [--queues N]  create and list N queues over HTTP (3 nodes)
    python bench/scale_bench.py idle [--groups G] [--settle S] [--windows W]
                                                     CPU and memory at rest, G groups on 3 nodes
    python bench/scale_bench.py cpu [--nodes N]      CPU per message per node, 6 groups, R=3

Clusters are fresh ``cmq serve`` processes on loopback (data in a temp directory), stopped at
the end. CPU is ``process_cpu_seconds_total`` and memory ``process_resident_memory_bytes`` from
each node's ``/metrics``. ``cpu`` offers the same load to every run: one ``cmq bench`` per data
group (its own queue, ``--rate`` msgs/s each, produce and consume), so a larger cluster spreads
the same work over more nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cmq.catalog.meta import CatalogMachine
from cmq.cli.launch import LocalCluster
from cmq.client import Client

SECRET = "scale-bench-secret-0123456789abcdef"


class Cluster(LocalCluster):
    """``n`` founding nodes with ``groups`` data groups, in a temp directory, started."""

    def __init__(self, n: int, groups: int, root: Path) -> None:
        super().__init__(root, n, groups=groups, secret=SECRET)
        self.start()

    async def ready(self, timeout: float = 600) -> float:
        return await super().ready(timeout)

    async def metrics(self) -> list[dict[str, float]]:
        out = []
        async with Client(self.urls, timeout=30) as c:
            for u in self.urls:
                text = await c.derive([u]).metrics()
                vals = {}
                for fam in text_string_to_metric_families(text):
                    if fam.name in (
                        "process_cpu_seconds",
                        "process_resident_memory_bytes",
                        "cmq_raft_quiesced_groups",
                    ):
                        vals[fam.name] = fam.samples[0].value
                out.append(vals)
        return out


def bench_catalog(queues: int) -> dict[str, Any]:
    m = CatalogMachine()
    for n in (1, 2, 3):
        m.apply(n, CatalogMachine.register_node(n, f"10.0.0.{n}:9080", ["/data"]))
    m.apply(4, CatalogMachine.init(6, 3, [1, 2, 3]))
    cmds = [CatalogMachine.assign(f"queue-{i:05d}") for i in range(queues)]
    t = time.perf_counter()
    for i, c in enumerate(cmds):
        m.apply(5 + i, c)
    apply_s = time.perf_counter() - t
    t = time.perf_counter()
    names = m.names()
    list_s = time.perf_counter() - t
    t = time.perf_counter()
    for name in names:
        m.group_of(name)
    route_ns = (time.perf_counter() - t) / len(names) * 1e9
    t = time.perf_counter()
    image = m.snapshot()
    snap_s = time.perf_counter() - t
    t = time.perf_counter()
    CatalogMachine().restore(1, image)
    restore_s = time.perf_counter() - t
    return {
        "queues": queues,
        "apply_all_ms": round(apply_s * 1000, 1),
        "list_ms": round(list_s * 1000, 2),
        "route_lookup_ns": round(route_ns),
        "snapshot_bytes": len(image),
        "snapshot_ms": round(snap_s * 1000, 1),
        "restore_ms": round(restore_s * 1000, 1),
    }


async def bench_queues(queues: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cmq-scale-") as tmp:
        cluster = Cluster(3, 6, Path(tmp))
        try:
            await cluster.ready()
            async with Client(cluster.urls, timeout=30, connections=concurrency) as c:
                sem = asyncio.Semaphore(concurrency)

                async def one(i: int) -> None:
                    async with sem:
                        await c.create_queue(f"queue-{i:05d}")

                t = time.perf_counter()
                await asyncio.gather(*(one(i) for i in range(queues)))
                create_s = time.perf_counter() - t
                t = time.perf_counter()
                names = await c.list_queues()
                list_s = time.perf_counter() - t
                assert len(names) == queues
            mem = [m["process_resident_memory_bytes"] for m in await cluster.metrics()]
        finally:
            cluster.stop()
    return {
        "queues": queues,
        "concurrency": concurrency,
        "create_s": round(create_s, 1),
        "creates_per_s": round(queues / create_s),
        "list_ms": round(list_s * 1000, 1),
        "rss_mib_per_node": [round(x / 2**20) for x in mem],
    }


async def bench_idle(
    groups: int, seconds: float, settle: float, windows: int, queues: int = 0
) -> dict[str, Any]:
    """CPU per node at rest over ``windows`` consecutive windows of ``seconds``, the first
    ``settle`` seconds after the cluster is ready (elections and leader balancing settle: with
    many groups the leadership hand-overs take a while,
    `cmq.node.membership.TRANSFERS_PER_ROUND`). ``queues``: empty queues created once the
    cluster is ready (spread over the groups), each holding one message, before the settle."""
    with tempfile.TemporaryDirectory(prefix="cmq-scale-") as tmp:
        cluster = Cluster(3, groups, Path(tmp))
        cpu: list[list[float]] = []
        quiet: list[list[int]] = []
        try:
            ready_s = await cluster.ready()
            if queues:
                async with Client(cluster.urls, timeout=30, connections=16) as c:
                    sem = asyncio.Semaphore(16)

                    async def one(i: int) -> None:
                        async with sem:
                            await c.create_queue(f"idle-{i:05d}")
                            await c.send_one(f"idle-{i:05d}", b"resting")

                    await asyncio.gather(*(one(i) for i in range(queues)))
            await asyncio.sleep(settle)
            before = await cluster.metrics()
            for _ in range(windows):
                await asyncio.sleep(seconds)
                after = await cluster.metrics()
                cpu.append(
                    [
                        round((a["process_cpu_seconds"] - b["process_cpu_seconds"]) / seconds, 3)
                        for a, b in zip(after, before, strict=True)
                    ]
                )
                quiet.append([int(a.get("cmq_raft_quiesced_groups", -1)) for a in after])
                before = after
        finally:
            cluster.stop()
    return {
        "groups": groups,
        "ready_s": round(ready_s, 1),
        "settle_s": settle,
        "queues": queues,
        "idle_cpu_share_of_a_core_per_node_per_window": cpu,
        "quiesced_groups_per_node_per_window": quiet,
        "rss_mib_per_node": [round(a["process_resident_memory_bytes"] / 2**20) for a in after],
    }


async def bench_cpu(nodes: int, rate: int, seconds: int) -> dict[str, Any]:
    groups = 6
    with tempfile.TemporaryDirectory(prefix="cmq-scale-") as tmp:
        cluster = Cluster(nodes, groups, Path(tmp))
        try:
            await cluster.ready()
            async with Client(cluster.urls, timeout=30) as c:
                for g in range(groups):  # least-loaded placement: one queue per group
                    await c.create_queue(f"load-{g}")
            await asyncio.sleep(10)
            before = await cluster.metrics()
            env = dict(os.environ)
            benches = [
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "cmq",
                    "bench",
                    "--url",
                    ",".join(cluster.urls),
                    "--queue",
                    f"load-{g}",
                    "--keep-queue",
                    "--producers",
                    "1",
                    "--consumers",
                    "1",
                    "--batch",
                    "10",
                    "--rate",
                    str(rate),
                    "--seconds",
                    str(seconds),
                    "--json",
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env=env,
                )
                for g in range(groups)
            ]
            reports = []
            for b in benches:
                out, _ = await b.communicate()
                reports.append(json.loads(out.decode()))
            after = await cluster.metrics()
        finally:
            cluster.stop()
    messages = sum(int(r["confirmed"]) for r in reports)
    cpu = [
        a["process_cpu_seconds"] - b["process_cpu_seconds"]
        for a, b in zip(after, before, strict=True)
    ]
    return {
        "nodes": nodes,
        "groups": groups,
        "offered_msgs_per_s": rate * groups,
        "messages": messages,
        "cpu_s_per_1000_msgs_per_node": [round(x * 1000 / max(messages, 1), 3) for x in cpu],
        "mean_cpu_s_per_1000_msgs_per_node": round(sum(cpu) * 1000 / max(messages, 1) / nodes, 3),
        "acked": sum(int(r["acked"]) for r in reports),
        "confirm_p99_ms": max(r["confirm_latency_ms"].get("p99", 0) for r in reports),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["catalog", "queues", "idle", "cpu"])
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10, help="seconds at rest first (idle)")
    ap.add_argument("--windows", type=int, default=1, help="CPU windows of --seconds (idle)")
    ap.add_argument("--idle-queues", type=int, default=0, help="queues of one message (idle)")
    ap.add_argument("--rate", type=int, default=100, help="msgs/s per group (cpu)")
    args = ap.parse_args()
    if args.what == "catalog":
        res = bench_catalog(args.queues)
    elif args.what == "queues":
        res = asyncio.run(bench_queues(args.queues, args.concurrency))
    elif args.what == "idle":
        res = asyncio.run(
            bench_idle(args.groups, args.seconds, args.settle, args.windows, args.idle_queues)
        )
    else:
        res = asyncio.run(bench_cpu(args.nodes, args.rate, int(args.seconds)))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
