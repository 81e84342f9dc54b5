"""Does ``cmq archive --follow`` keep up? (issue 31, part 4; docs/archive.md).

A three-node cluster of real ``cmq serve`` processes on loopback (one data group) gets a queue
with ``archive=true``. Producers send batches of ``--batch`` messages of ``--size`` bytes at a
target ``--rate`` (messages/s; default 10,000, the cluster's J1x10 rate in bench/RESULTS.md;
on a shared machine the achieved rate is what it allows and is reported), consumers receive
and ack them, and ``cmq archive --follow`` (``python -m cmq.archive --follow``, its own
process and JVM, ``local[2]``) runs beside them for ``--seconds``. Segments seal at
``--segment-bytes`` or after ``--segment-age`` seconds.

Every ``--sample`` seconds: the bytes of the queue's segment files on each node's disk (a walk
of its data directory) and ``cmq_queue_oldest_unarchived_seconds{queue=...}`` scraped from each
node's ``/metrics`` (the largest of the three). Written: a CSV (``--csv``) and a small SVG of
both curves (``--svg``, drawn by hand: no plotting library needed).

    python bench/archive_follow_soak.py [--seconds 600] [--rate 10000] [--size 1024]
        [--batch 10] [--segment-bytes 4194304] [--segment-age 5] [--max-segments 16]
        [--idle-backoff-max 5] [--csv docs/archive-follow-soak.csv]
        [--svg docs/archive-follow-soak.svg]

Prints one JSON object: the achieved send and ack rates, disk bytes (sum over the nodes)
min/median/max, the lag's p50/p99/max, both slopes over the run's second half (least squares,
per minute), and the follow process's batches (count, segments, rows, median rows/s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from cmq.cli.launch import LocalCluster
from cmq.client import Client
from cmq.client.types import Message

QUEUE = "soak"
LAG_METRIC = "cmq_queue_oldest_unarchived_seconds"


@dataclass
class Counters:
    sent: int = 0
    acked: int = 0
    send_errors: int = 0
    error_kinds: Counter[str] = field(default_factory=Counter)
    """Failed sends by error code (a `CmqError`'s ``code``) or exception class."""


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    sent: int
    acked: int
    disk: tuple[int, ...]
    lag: float

    @property
    def disk_total(self) -> int:
        return sum(self.disk)


def segment_bytes(node_dir: Path) -> int:
    """Bytes of the queue's segment files under one node's data directory."""
    total = 0
    for dirpath, _, files in os.walk(node_dir):
        if QUEUE not in os.path.basename(dirpath):
            continue
        for f in files:
            if f.endswith(".seg"):
                with contextlib.suppress(FileNotFoundError):  # removed while we walk
                    total += os.stat(os.path.join(dirpath, f)).st_size
    return total


async def scrape_lag(session: aiohttp.ClientSession, urls: list[str]) -> float:
    """The largest ``cmq_queue_oldest_unarchived_seconds`` of the queue over the nodes."""
    best = 0.0
    for url in urls:
        try:
            async with session.get(url + "/metrics") as r:
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError):
            continue
        for line in text.splitlines():
            if line.startswith(LAG_METRIC + "{") and f'queue="{QUEUE}"' in line:
                best = max(best, float(line.rsplit(" ", 1)[1]))
    return best


@dataclass
class Pace:
    """The producers' shared schedule: a batch every ``batch / rate`` seconds in all."""

    rate: float
    batch: int
    bodies: list[str]
    stop_at: float
    next_at: float

    def claim(self, now: float) -> float:
        """When the next batch is due (at most 1 s of catch-up after falling behind)."""
        due = self.next_at
        self.next_at = max(due, now - 1.0) + self.batch / self.rate
        return due


async def produce(client: Client, c: Counters, pace: Pace) -> None:
    loop = asyncio.get_running_loop()
    i = 0
    while (now := loop.time()) < pace.stop_at:
        due = pace.claim(now)
        if due > now:
            await asyncio.sleep(due - now)
        msgs = [Message(pace.bodies[(i + k) % len(pace.bodies)]) for k in range(pace.batch)]
        i += pace.batch
        try:
            await client.send(QUEUE, msgs)
            c.sent += pace.batch
        except Exception as e:  # counted by kind and reported: the soak goes on
            c.send_errors += 1
            c.error_kinds[getattr(e, "code", None) or type(e).__name__] += 1


async def consume(client: Client, c: Counters, stop_at: float) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < stop_at + 5:
        try:
            got = await client.receive(QUEUE, 100, wait_seconds=1)
            if got:
                await client.ack(QUEUE, [m.receipt for m in got])
                c.acked += len(got)
        except Exception:
            await asyncio.sleep(0.2)


async def run_load(
    cluster: LocalCluster, root: Path, args: argparse.Namespace, samples: list[Sample]
) -> Counters:
    c = Counters()
    bodies = [os.urandom(args.size // 2).hex() for _ in range(256)]
    async with Client(cluster.urls, timeout=60) as client:
        await client.create_queue(QUEUE, {"archive": True})
        loop = asyncio.get_running_loop()
        start = loop.time()
        stop_at = start + args.seconds
        pace = Pace(args.rate, args.batch, bodies, stop_at, start)
        tasks = [asyncio.create_task(produce(client, c, pace)) for _ in range(args.producers)] + [
            asyncio.create_task(consume(client, c, stop_at)) for _ in range(args.consumers)
        ]
        nodes = sorted(
            p for p in (root / "cluster").iterdir() if p.is_dir() and p.name.startswith("node")
        )
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
                while loop.time() < stop_at:
                    disk = tuple(
                        await asyncio.gather(*(asyncio.to_thread(segment_bytes, n) for n in nodes))
                    )
                    lag = await scrape_lag(http, cluster.urls)
                    samples.append(Sample(loop.time() - start, c.sent, c.acked, disk, lag))
                    print(samples[-1], file=sys.stderr, flush=True)
                    await asyncio.sleep(args.sample)
        finally:
            await asyncio.gather(*tasks, return_exceptions=True)
    return c


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (per unit of x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def svg(samples: list[Sample], title: str) -> str:
    """Two panels (disk MB, lag s) over minutes, as plain SVG."""
    w, h, pad = 640, 180, 48
    ts = [s.t / 60 for s in samples]
    tmax = max(ts[-1], 1e-9)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h + 40}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{pad}" y="16" font-size="13">{title}</text>',
    ]
    panels = [
        ("segment files on disk, MB (3 nodes)", [s.disk_total / 1e6 for s in samples], "#1f77b4"),
        ("oldest unarchived, s", [s.lag for s in samples], "#d62728"),
    ]
    for i, (label, ys, color) in enumerate(panels):
        top = 30 + i * h
        ymax = max(*ys, 1e-9) * 1.1
        x0, x1, y0, y1 = pad, w - 10, top + h - 30, top + 10

        out.append(f'<text x="{x0}" y="{y1 - 2}">{label}</text>')
        out.append(f'<polyline fill="none" stroke="#888" points="{x0},{y1} {x0},{y0} {x1},{y0}"/>')
        for k in range(5):
            yv = ymax * k / 4
            yy = y0 - (y0 - y1) * k / 4
            out.append(f'<text x="{x0 - 4}" y="{yy + 4:.1f}" text-anchor="end">{yv:.0f}</text>')
        for k in range(int(tmax) + 1):
            xx = x0 + (x1 - x0) * k / tmax
            out.append(f'<text x="{xx:.1f}" y="{y0 + 14}" text-anchor="middle">{k}</text>')
        pts = " ".join(
            f"{x0 + (x1 - x0) * t / tmax:.1f},{y0 - (y0 - y1) * y / ymax:.1f}"
            for t, y in zip(ts, ys, strict=True)
        )
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>')
    out.append(f'<text x="{w // 2}" y="{2 * h + 34}" text-anchor="middle">minutes</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def summarize(
    samples: list[Sample], c: Counters, seconds: float, batches: list[dict[str, Any]]
) -> dict[str, Any]:
    disk = [float(s.disk_total) for s in samples]
    lags = [s.lag for s in samples]
    half = [s for s in samples if s.t >= samples[-1].t / 2]
    done = [b for b in batches if b.get("ok") and b.get("segments")]
    return {
        "seconds": round(seconds, 1),
        "sent_per_s": round(c.sent / seconds),
        "acked_per_s": round(c.acked / seconds),
        "send_errors": c.send_errors,
        "send_error_kinds": dict(c.error_kinds),
        "disk_bytes": {
            "min": int(min(disk)),
            "median": int(statistics.median(disk)),
            "max": int(max(disk)),
        },
        "lag_s": {
            "p50": round(pct(lags, 0.5), 1),
            "p99": round(pct(lags, 0.99), 1),
            "max": round(max(lags), 1),
        },
        "second_half_slope": {
            "disk_MB_per_min": round(slope([(s.t / 60, s.disk_total / 1e6) for s in half]), 2),
            "lag_s_per_min": round(slope([(s.t / 60, s.lag) for s in half]), 2),
        },
        "batches": {
            "all": len(batches),
            "with_segments": len(done),
            "failed": sum(1 for b in batches if not b.get("ok")),
            "segments": sum(b["segments"] for b in done),
            "rows": sum(b["rows"] for b in done),
            "median_rows_s": round(statistics.median(b["rows"] / b["seconds"] for b in done))
            if done
            else 0,
        },
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--rate", type=float, default=10_000, help="target messages/s (J1x10)")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--batch", type=int, default=10, help="messages per send")
    p.add_argument("--producers", type=int, default=32, help="concurrent sends")
    p.add_argument("--consumers", type=int, default=8)
    p.add_argument("--segment-bytes", type=int, default=4 << 20)
    p.add_argument("--segment-age", type=float, default=5)
    p.add_argument("--max-segments", type=int, default=16)
    p.add_argument("--idle-backoff-max", type=float, default=5)
    p.add_argument("--sample", type=float, default=5)
    p.add_argument("--csv", default="docs/archive-follow-soak.csv")
    p.add_argument("--svg", default="docs/archive-follow-soak.svg")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cmq-follow-soak-"))
    cluster = LocalCluster(root / "cluster", 3, groups=1)
    for nid, s in cluster.settings.items():
        cluster.settings[nid] = replace(
            s, segment_max_bytes=args.segment_bytes, segment_max_age=args.segment_age
        )
    samples: list[Sample] = []
    batches: list[dict[str, Any]] = []
    log = root / "follow.out"
    try:
        cluster.start()
        asyncio.run(cluster.ready(120))
        follow = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cmq.archive",
                "--follow",
                "--url",
                ",".join(cluster.urls),
                "--out",
                str(root / "archive"),
                "--max-segments",
                str(args.max_segments),
                "--idle-backoff-max",
                str(args.idle_backoff_max),
                "--json",
            ],
            stdout=log.open("w"),
            stderr=(root / "follow.err").open("w"),
        )
        try:
            started = time.monotonic()
            counters = asyncio.run(run_load(cluster, root, args, samples))
            seconds = time.monotonic() - started
        finally:
            follow.send_signal(signal.SIGTERM)
            try:
                status = follow.wait(300)
            except subprocess.TimeoutExpired:
                follow.kill()
                status = follow.wait()
    finally:
        cluster.stop()
    for raw in log.read_text().splitlines():
        if raw.startswith("{"):
            batches.append(json.loads(raw))
    out = summarize(samples, counters, seconds, batches)
    out |= {"follow_exit": status, "target_rate": args.rate, "size": args.size}
    out["work_dir"] = str(root)
    with open(args.csv, "w") as f:
        f.write("t_s,sent,acked,disk_node1,disk_node2,disk_node3,disk_total,lag_s\n")
        for s in samples:
            disk = ",".join(str(d) for d in s.disk)
            f.write(f"{s.t:.1f},{s.sent},{s.acked},{disk},{s.disk_total},{s.lag:.1f}\n")
    title = (
        f"cmq archive --follow beside {out['sent_per_s']:,} msg/s of {args.size} B "
        f"for {args.seconds / 60:.0f} min"
    )
    Path(args.svg).write_text(svg(samples, title))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
