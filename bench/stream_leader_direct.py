"""Leader-direct stream clients, A/B: J1 over the streaming protocol (one `StreamClient` producer,
64 unconfirmed sends of one 1 KiB message in flight) on one fresh local cluster (3 nodes on
loopback, started as `cmq dev` starts them, every confirm a majority fsync), with the client
following the stream's leader hint (``leader_direct=True``, the default) and without it
(every frame goes over the connection to the producer's own node, which forwards it).

    python bench/stream_leader_direct.py [--seconds 15] [--runs 3] [--json]

Each run gets a fresh queue; the producer's URLs are ordered so that its first node is a
follower of the queue's group (the case leader-direct changes). Inside each run both modes run,
alternating which goes first (on/off, then off/on), so they compare as ratios on a shared
machine. Per run: confirmed msgs/s, confirm latency p50, CPU microseconds per confirmed message
on the leader's node and on all three nodes together (``process_cpu_seconds_total``), errors,
and stored = confirmed check (a message stored more than once, or confirmed and missing, fails
the run: exit status 1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from leader_direct import cpu_seconds, leader_url  # this script's neighbour in bench/

from cmq.cli.launch import LocalCluster
from cmq.client import SyncClient
from cmq.client.stream import StreamClient

WINDOW = 64
BODY = b"x" * 1024


async def j1(urls: list[str], queue: str, seconds: float, direct: bool) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    slots = asyncio.Semaphore(WINDOW)
    pending: set[asyncio.Task[None]] = set()
    async with StreamClient(urls, window=WINDOW, leader_direct=direct) as c:

        async def one() -> None:
            nonlocal errors
            t0 = time.perf_counter()
            try:
                await c.send(queue, [BODY])
                latencies.append(time.perf_counter() - t0)
            except Exception:
                errors += 1
            finally:
                slots.release()

        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            await slots.acquire()
            task = asyncio.get_running_loop().create_task(one())
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.wait(pending, timeout=120)
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "confirmed": len(latencies),
        "confirmed_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1) if latencies else None,
        "errors": errors,
    }


def run(urls: list[str], seconds: float, direct: bool) -> dict[str, Any]:
    queue = f"sld-{uuid.uuid4().hex[:8]}"
    with SyncClient(urls, timeout=30) as admin:
        admin.create_queue(queue, {})
    lead = leader_url(urls, queue)
    order = [u for u in urls if u != lead] + [lead]  # the producer's first node: a follower
    cpu0 = {u: cpu_seconds(u) for u in urls}
    out = asyncio.run(j1(order, queue, seconds, direct))
    cpu1 = {u: cpu_seconds(u) for u in urls}
    with SyncClient(urls, timeout=30) as admin:
        stored = admin.get_queue(queue).stats.visible
        admin.delete_queue(queue)
    confirmed = max(1, out["confirmed"])
    out |= {
        "leader_direct": direct,
        "stored": stored,
        "leader_cpu_us_per_msg": round((cpu1[lead] - cpu0[lead]) * 1e6 / confirmed, 1),
        "cluster_cpu_us_per_msg": round(sum(cpu1[u] - cpu0[u] for u in urls) * 1e6 / confirmed, 1),
    }
    # Every confirmed send stored once; a send of unknown outcome (an error) may be stored too.
    out["ok"] = out["confirmed"] <= stored <= out["confirmed"] + out["errors"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    data = tempfile.mkdtemp(prefix="cmq-stream-ld-")
    cluster = LocalCluster(Path(data) / "nodes", 3)
    cluster.start()
    runs: list[dict[str, Any]] = []
    try:
        asyncio.run(cluster.ready(90))
        time.sleep(2)
        for r in range(a.runs):
            for direct in (True, False) if r % 2 == 0 else (False, True):
                one = run(cluster.urls, a.seconds, direct)
                print(json.dumps(one), flush=True)
                runs.append(one)
    finally:
        cluster.stop(30)
    print(
        "\n| leader-direct | confirmed/s (median; runs) | p50 ms | leader CPU µs/msg "
        "| cluster CPU µs/msg |"
    )
    print("|---|---:|---:|---:|---:|")
    med: dict[bool, float] = {}
    for direct in (False, True):
        mine = [x for x in runs if x["leader_direct"] is direct]

        def m(key: str, rows: list[dict[str, Any]] = mine) -> float:
            return statistics.median(float(x[key] or 0) for x in rows)

        med[direct] = m("confirmed_per_s")
        rates = " / ".join(f"{x['confirmed_per_s']:,.0f}" for x in mine)
        print(
            f"| {'on' if direct else 'off'} | **{med[direct]:,.0f}** ({rates}) | {m('p50_ms'):.1f} "
            f"| {m('leader_cpu_us_per_msg'):.0f} | {m('cluster_cpu_us_per_msg'):.0f} |"
        )
    if med.get(False):
        print(f"on/off: x{med[True] / med[False]:.2f}")
    if a.json:
        print(json.dumps(runs))
    return 0 if all(x["ok"] for x in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
