"""How fast ``cmq archive`` stores released segments (docs/archive.md; issue 31, part 1).

A three-node cluster of real ``cmq serve`` processes on loopback (one data group) gets
``--queues`` queues with ``archive=true``, each ``--messages`` messages of ``--size`` bytes
(random hex text) sent and acked, so every segment is released. Segments seal at
``--segment-bytes`` (and after 2 s). Then one warm Spark session (``local[2]``, started once,
a warm-up batch first) runs the archive job once per queue (`cmq.archive.job.ArchiveJob`, what
``cmq archive --queue Q`` runs), alternating the ``--forms`` given (in order, then reversed,
and so on): ``pyarrow`` (the binary
read, Parquet written by the Python workers: the default on a local ``--out``), ``pyarrow8``
(the same with 8 segments a task, the grouping before), ``spark`` (the
binary read, Spark's writer: ``--writer spark``) and ``json`` (the JSON lines, ``--json-read``,
Spark's writer). Each run is timed as the job reports it (listing, claims, the read-and-write,
the verification, manifest, MarkArchived; no JVM start).

The reference is the raw read bandwidth of the same segment files: every ``.seg`` file of the
queues on node 1 read with plain ``read`` calls in the same run (page cache warm, as the
node's own reads are), and the binary read alone (every segment fetched and decoded by
`cmq.archive.records.read_segment`, no Spark), which bounds what the job can reach.

    python bench/archive_bench.py [--messages 60000] [--queues 6] [--size 1024]
                                  [--segment-bytes 1048576] [--master local[2]]
                                  [--forms pyarrow,spark]

Prints one JSON object: per form the runs' rows/s and MB/s (of segment bytes), their medians,
the ratio of each form's median to the last form's, and the reference bandwidths.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import secrets
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from cmq.archive.job import ArchiveJob, JobConfig
from cmq.archive.main import spark_session
from cmq.archive.records import plan_tasks, read_segment
from cmq.archive.remote import ClusterClient
from cmq.cli.launch import LocalCluster
from cmq.client import Client
from cmq.client.types import Message

FORMS = {"pyarrow": "pyarrow", "pyarrow8": "pyarrow", "spark": "spark", "json": "spark"}
"""A run's form -> the job's writer (``json`` also reads the JSON lines; ``pyarrow8`` cuts the
batch into tasks of 8 segments, the pyarrow writer's grouping before it spread a batch over
Spark's cores in one wave)."""


async def load(urls: list[str], queues: list[str], messages: int, size: int) -> float:
    """Send and ack ``messages`` per queue; seconds taken."""
    start = time.monotonic()
    async with Client(urls, timeout=60) as client:
        for q in queues:
            await client.create_queue(q, {"archive": True})
        gate = asyncio.Semaphore(16)

        async def send(q: str, first: int, n: int) -> None:
            # Random text (Parquet does not compress it away); a dedup id each, so the client
            # retries a send whose outcome a leadership change left unknown.
            batch = [
                Message(secrets.token_hex(size // 2), dedup_id=f"{q}-{first + i}") for i in range(n)
            ]
            async with gate:
                await client.send(q, batch)

        async def drain(q: str, acked: list[int]) -> None:
            while acked[0] < messages:
                got = await client.receive(q, 100, wait_seconds=1)
                acked[0] += len(got)
                if got:
                    await client.ack(q, [m.receipt for m in got])

        for q in queues:
            acked = [0]
            sends = [send(q, i, min(100, messages - i)) for i in range(0, messages, 100)]
            await asyncio.gather(*sends, *(drain(q, acked) for _ in range(4)))
    return time.monotonic() - start


def wait_released(client: ClusterClient, queues: list[str], messages: int) -> None:
    deadline = time.monotonic() + 120
    for q in queues:
        while sum(s.count for s in client.segments(q, "released").segments) < messages:
            if time.monotonic() > deadline:
                raise TimeoutError(f"queue {q}: not every segment was released")
            time.sleep(0.5)


def raw_read(root: Path, queues: list[str]) -> tuple[int, float]:
    """(bytes, seconds) reading every segment file of ``queues`` on node 1."""
    files = [p for q in queues for p in sorted(root.glob(f"node1/**/{q}.*/*.seg"))]
    start = time.monotonic()
    total = 0
    for p in files:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total, time.monotonic() - start


def reader_only(urls: list[str], queue: str) -> tuple[int, int, float]:
    """(rows, segment bytes, seconds) fetching and decoding every released segment of
    ``queue`` in the binary form, one after another, without Spark."""
    tasks = plan_tasks(ClusterClient(urls, 60), [queue])
    start = time.monotonic()
    rows = sum(read_segment(t, 60).rows for t in tasks)
    return rows, sum(t.bytes for t in tasks), time.monotonic() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=60_000, help="per queue")
    p.add_argument("--queues", type=int, default=6, help="runs in all, alternating forms")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--segment-bytes", type=int, default=1 << 20)
    p.add_argument("--master", default="local[2]")
    p.add_argument(
        "--forms", default="pyarrow,spark", help="comma-separated, alternated: pyarrow,spark,json"
    )
    args = p.parse_args()
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if not forms or set(forms) - set(FORMS):
        p.error(f"--forms: a comma-separated list of {', '.join(FORMS)}")
    root = Path(tempfile.mkdtemp(prefix="cmq-archive-bench-"))
    cluster = LocalCluster(root / "cluster", 3, groups=1)
    for nid, s in cluster.settings.items():
        cluster.settings[nid] = replace(s, segment_max_bytes=args.segment_bytes, segment_max_age=2)
    queues = [f"arch-{i}" for i in range(args.queues)]
    out: dict[str, Any] = {"messages_per_queue": args.messages, "size": args.size}
    try:
        cluster.start()
        asyncio.run(asyncio.wait_for(_ready(cluster), 120))
        loaded = asyncio.run(load(cluster.urls, queues, args.messages, args.size))
        out["load_seconds"] = round(loaded, 1)
        client = ClusterClient(cluster.urls, 60)
        wait_released(client, queues, args.messages)
        raw_bytes, raw_s = raw_read(root / "cluster", queues)
        out["raw_read_MB_s"] = round(raw_bytes / 1e6 / raw_s, 1)
        rows, seg_bytes, took = reader_only(cluster.urls, queues[0])
        out["binary_reader_only"] = {
            "rows_s": round(rows / took),
            "MB_s": round(seg_bytes / 1e6 / took, 1),
        }
        spark = spark_session(args.master)
        try:
            warm = "arch-warm"
            asyncio.run(load(cluster.urls, [warm], 2000, args.size))
            wait_released(client, [warm], 2000)
            with tempfile.TemporaryDirectory() as tmp:
                cfg = JobConfig(urls=tuple(cluster.urls), out=tmp, queues=(warm,), timeout=120)
                ArchiveJob(lambda: spark, cfg).run()
            runs: dict[str, list[dict[str, Any]]] = {f: [] for f in forms}
            for i, q in enumerate(queues):
                # A-B then B-A: a load that rises or falls through the runs favours neither.
                rnd = forms if (i // len(forms)) % 2 == 0 else forms[::-1]
                form = rnd[i % len(forms)]
                with tempfile.TemporaryDirectory() as tmp:
                    cfg = JobConfig(
                        urls=tuple(cluster.urls),
                        out=tmp,
                        queues=(q,),
                        timeout=120,
                        binary=form != "json",
                        writer=FORMS[form],
                        segments_per_task=8 if form == "pyarrow8" else None,
                    )
                    steps: list[tuple[str, float]] = []

                    def step(what: str, steps: list[tuple[str, float]] = steps) -> None:
                        steps.append((what.split(" ", maxsplit=1)[0], time.monotonic()))

                    s = ArchiveJob(lambda: spark, cfg, progress=step).run()
                    steps.append(("end", time.monotonic()))
                phases = {a: round(t2 - t1, 2) for (a, t1), (_, t2) in itertools.pairwise(steps)}
                runs[form].append(
                    {
                        "rows": s.rows,
                        "segments": s.segments,
                        "seconds": round(s.seconds, 2),
                        "rows_s": round(s.rows / s.seconds),
                        "MB_s": round(s.source_bytes / 1e6 / s.seconds, 2),
                        "phases_s": phases,
                    }
                )
                print(form, runs[form][-1], flush=True)
        finally:
            spark.stop()
    finally:
        cluster.stop()
    out["runs"] = runs
    for form, rs in runs.items():
        out[f"{form}_median_rows_s"] = statistics.median(r["rows_s"] for r in rs)
        out[f"{form}_median_MB_s"] = statistics.median(r["MB_s"] for r in rs)
        out[f"{form}_median_write_s"] = statistics.median(r["phases_s"]["writing"] for r in rs)
    base = forms[-1]
    for form in forms[:-1]:
        ratio = out[f"{form}_median_rows_s"] / out[f"{base}_median_rows_s"]
        out[f"ratio_{form}_{base}"] = round(ratio, 2)
    for form in forms:
        out[f"{form}_vs_raw_read"] = round(out[f"{form}_median_MB_s"] / out["raw_read_MB_s"], 4)
        out[f"{form}_vs_reader_only"] = round(
            out[f"{form}_median_rows_s"] / out["binary_reader_only"]["rows_s"], 3
        )
    print(json.dumps(out, indent=2))


async def _ready(cluster: LocalCluster) -> None:
    await cluster.ready()


if __name__ == "__main__":
    main()
