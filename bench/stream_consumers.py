"""Push consumers over the streaming protocol: do they keep up with the producers, and where
does a delivered message wait? One fresh local cluster (3 nodes on loopback, started as
`cmq dev` starts them, every confirm and every ack a majority fsync), the side-by-side
harness's J2 through `cmq.client.stream.StreamClient`:

    python bench/stream_consumers.py [--seconds 15] [--runs 3] [--prefetch 64]
                                     [--variants commit,send] [--json]

J2: 4 producers (one connection each, 64 unconfirmed 1 KiB sends in flight), 2 consumers (one
connection each, one subscription with the prefetch, batches of at most 32, at most 4 acks in
flight, as the harness), all at once for ``--seconds``; then the producers stop and the
consumers drain. Each variant gets a fresh queue; variants alternate inside each run, so they
compare as ratios on a shared machine. A variant is ``MODE`` or ``MODE@PREFETCH``:

* ``commit``: the consumer grants a batch's credit back after its ack has committed
  (`StreamClient.ack`, then `Subscription.grant`), as `Subscription.ack` did before;
* ``send``: `Subscription.ack`, which grants the credit back as the ack is sent (the `Credit`
  frame rides in the same WebSocket message as the `Ack`).

Per variant, as the harness counts them: sent/s (every confirm over the time until the last
producer had its answers), acked/s (acks answered inside the window over the window), their
ratio, end-to-end p50/p99 (send call to the consumer holding the message), missing and
duplicates after the drain, and the breakdown of where a delivered message waited, medians and
p99 over the run:

* ``confirm``: the send call to its confirm (the produce's Raft commit, seen by the producer);
* ``queued``: its confirm to its delivery (waiting for credit, then the lease's commit, the
  render, the socket);
* ``lease``: a credit grant sent while the consumer held its whole prefetch to the next
  delivery (the lease's commit + render + socket + the client's read: the refill latency);
* ``hold``: the delivery to its ack being sent (the consumer's own loop, its 4 acks in flight);
* ``ack``: the ack sent to its committed result (the ack's Raft commit, round trip);
* ``starved``: the share of the window the consumer held its whole prefetch (the server had no
  credit to lease with);
* ``cmd/entry``: commands proposed per Raft entry over the variant, all nodes (the nodes'
  ``cmq_raft_proposals`` over ``cmq_raft_proposal_batches``: proposals that arrive while a
  group is busy share one entry, so an ack and the lease its credit starts can share one);
* ``msgs/delivery``: messages per pushed batch (a lease takes what is visible, up to 32).

Exit status 1 when a run lost or duplicated a message.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import struct
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmq.cli.launch import LocalCluster
from cmq.client import SyncClient
from cmq.client.stream import StreamClient, Subscription
from cmq.client.types import ReceivedMessage

PRODUCERS = 4
CONSUMERS = 2
WINDOW = 64
BODY = 1024
MAX_BATCH = 32
ACKS_IN_FLIGHT = 4


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


@dataclass
class Stats:
    sent_at: dict[int, float] = field(default_factory=dict)
    confirmed_at: dict[int, float] = field(default_factory=dict)
    confirmed: int = 0
    received: set[int] = field(default_factory=set)
    dups: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    acked_in_window: int = 0
    window_open: bool = True
    producers_done: bool = False
    e2e: list[float] = field(default_factory=list)
    confirm: list[float] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)
    lease: list[float] = field(default_factory=list)
    hold: list[float] = field(default_factory=list)
    ack: list[float] = field(default_factory=list)
    starved: float = 0.0
    batches: list[int] = field(default_factory=list)
    confirmed_rate: float = 0.0


def settled(st: Stats) -> bool:
    """Every confirmed message was received (a send that failed may have committed too, so the
    count alone is not enough)."""
    return not st.confirmed_at.keys() - st.received


class Starvation:
    """How long one consumer held its whole prefetch (the server had no credit)."""

    def __init__(self, sub: Subscription, st: Stats) -> None:
        self.sub, self.st = sub, st
        self.since: float | None = None
        self.refill: float | None = None

    def check(self, now: float) -> None:
        full = self.sub.outstanding >= self.sub.prefetch
        if full and self.since is None:
            self.since = now
        elif not full and self.since is not None:
            if self.st.window_open:
                self.st.starved += now - self.since
            self.since = None
            self.refill = now  # the credit that ends a starvation: time its refill

    def delivered(self, now: float) -> None:
        if self.refill is not None:
            self.st.lease.append(now - self.refill)
            self.refill = None
        self.check(now)


async def j2(urls: list[str], queue: str, seconds: float, mode: str, prefetch: int) -> Stats:
    st = Stats()
    stop = asyncio.Event()
    seqs = itertools.count()
    clients: list[StreamClient] = []

    async def producer(i: int) -> None:
        c = StreamClient(urls[i % len(urls)], window=WINDOW)
        clients.append(c)
        slots = asyncio.Semaphore(WINDOW)
        pending: set[asyncio.Task[None]] = set()

        async def one() -> None:
            seq = next(seqs)
            t0 = time.time()
            st.sent_at[seq] = t0
            body = struct.pack(">Q", seq) + b"x" * (BODY - 8)
            try:
                await c.send(queue, [body])
                now = time.time()
                st.confirmed_at[seq] = now
                st.confirm.append(now - t0)
                st.confirmed += 1
            except Exception as e:
                st.errors += 1
                kind = "send " + type(e).__name__
                st.error_kinds[kind] = st.error_kinds.get(kind, 0) + 1
            finally:
                slots.release()

        while not stop.is_set():
            await slots.acquire()
            task = asyncio.get_running_loop().create_task(one())
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:  # every send's outcome known before the drain's end is judged
            await asyncio.wait(pending, timeout=120)

    async def consumer(i: int) -> None:
        c = StreamClient(urls[(i + 1) % len(urls)], window=WINDOW)
        clients.append(c)
        sub = await c.subscribe(
            queue, prefetch=prefetch, visibility_timeout=60, max_batch=MAX_BATCH
        )
        starve = Starvation(sub, st)
        acks = asyncio.Semaphore(ACKS_IN_FLIGHT)
        pending: set[asyncio.Task[None]] = set()

        async def ack(batch: list[ReceivedMessage], arrived: float) -> None:
            t0 = time.time()
            st.hold.extend([t0 - arrived] * len(batch))
            try:
                if mode == "send":
                    fut = asyncio.ensure_future(sub.ack(batch))
                    await asyncio.sleep(0)  # the ack and its credit are queued by now
                    starve.check(time.time())
                    await fut
                else:
                    await c.ack(queue, [m.receipt for m in batch])
                    await sub.grant(len(batch))
                    starve.check(time.time())
                st.ack.append(time.time() - t0)
                if st.window_open:
                    st.acked_in_window += len(batch)
            except Exception as e:
                st.errors += 1
                kind = "ack " + type(e).__name__
                st.error_kinds[kind] = st.error_kinds.get(kind, 0) + 1
            finally:
                acks.release()

        while True:
            try:
                batch = await asyncio.wait_for(sub.next(), timeout=1.0)
            except TimeoutError:
                batch = []
            now = time.time()
            if batch:
                starve.delivered(now)
                st.batches.append(len(batch))
            for m in batch:
                assert isinstance(m.body, bytes)
                (seq,) = struct.unpack(">Q", m.body[:8])
                t0 = st.sent_at.get(seq, now)
                st.e2e.append(now - t0)
                confirmed = st.confirmed_at.get(seq)
                if confirmed is not None:
                    st.queued.append(now - confirmed)
                if seq in st.received:
                    st.dups += 1
                st.received.add(seq)
            if batch:
                await acks.acquire()
                task = asyncio.get_running_loop().create_task(ack(batch, now))
                pending.add(task)
                task.add_done_callback(pending.discard)
            if st.producers_done and len(st.received) >= st.confirmed and settled(st):
                break
        if pending:
            await asyncio.wait(pending, timeout=60)
        await sub.close()

    cons = [asyncio.ensure_future(consumer(i)) for i in range(CONSUMERS)]
    await asyncio.sleep(0.2)  # subscriptions open before the first send
    t0 = time.perf_counter()
    prods = [asyncio.ensure_future(producer(i)) for i in range(PRODUCERS)]
    await asyncio.sleep(seconds)
    stop.set()
    st.window_open = False
    elapsed = time.perf_counter() - t0
    await asyncio.wait(prods, timeout=150)
    st.producers_done = True
    produced = time.perf_counter() - t0  # the harness's sent/s: every confirm over this
    await asyncio.wait(cons, timeout=180)  # a lease lost with a connection comes back in 60 s
    for c in clients:
        await c.close()
    st.starved /= elapsed * CONSUMERS
    st.acked_in_window = int(st.acked_in_window / elapsed)  # as a rate from here on
    st.confirmed_rate = st.confirmed / produced
    return st


def figures(st: Stats) -> dict[str, Any]:
    sent = st.confirmed_rate
    ms = 1000.0
    return {
        "sent_s": round(sent),
        "acked_s": st.acked_in_window,
        "acked_per_sent": round(st.acked_in_window / sent, 3) if sent else 0.0,
        "e2e_p50_ms": round(pct(st.e2e, 50) * ms, 1),
        "e2e_p99_ms": round(pct(st.e2e, 99) * ms, 1),
        "missing": len(st.confirmed_at.keys() - st.received),
        "dups": st.dups,
        "errors": st.errors,
        "error_kinds": dict(st.error_kinds),
        "confirm_p50_ms": round(pct(st.confirm, 50) * ms, 1),
        "queued_p50_ms": round(pct(st.queued, 50) * ms, 1),
        "queued_p99_ms": round(pct(st.queued, 99) * ms, 1),
        "lease_p50_ms": round(pct(st.lease, 50) * ms, 1),
        "lease_p99_ms": round(pct(st.lease, 99) * ms, 1),
        "hold_p50_ms": round(pct(st.hold, 50) * ms, 1),
        "ack_p50_ms": round(pct(st.ack, 50) * ms, 1),
        "ack_p99_ms": round(pct(st.ack, 99) * ms, 1),
        "starved": round(st.starved, 3),
        "batch_mean": round(statistics.fmean(st.batches), 1) if st.batches else 0.0,
    }


def raft_counters(urls: list[str]) -> tuple[float, float]:
    """(commands proposed, entries they were packed into), summed over the nodes."""
    proposals = entries = 0.0
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("cmq_raft_proposals_total{"):
                    proposals += float(line.rsplit(" ", 1)[1])
                elif line.startswith("cmq_raft_proposal_batches_total{"):
                    entries += float(line.rsplit(" ", 1)[1])
    return proposals, entries


def variant(name: str, prefetch: int) -> tuple[str, int]:
    mode, _, p = name.partition("@")
    if mode not in {"commit", "send"}:
        raise SystemExit(f"unknown variant {name!r}: commit or send, optionally @PREFETCH")
    return mode, int(p) if p else prefetch


COLUMNS = [
    ("sent/s", "sent_s"),
    ("acked/s", "acked_s"),
    ("acked/sent", "acked_per_sent"),
    ("e2e p50", "e2e_p50_ms"),
    ("e2e p99", "e2e_p99_ms"),
    ("confirm p50", "confirm_p50_ms"),
    ("queued p50/p99", ("queued_p50_ms", "queued_p99_ms")),
    ("lease p50/p99", ("lease_p50_ms", "lease_p99_ms")),
    ("hold p50", "hold_p50_ms"),
    ("ack p50/p99", ("ack_p50_ms", "ack_p99_ms")),
    ("starved", "starved"),
    ("cmd/entry", "commands_per_entry"),
    ("msgs/delivery", "batch_mean"),
    ("missing/dups", ("missing", "dups")),
]


def row(name: str, f: dict[str, Any]) -> str:
    cells = [name]
    for _, key in COLUMNS:
        if isinstance(key, tuple):
            cells.append(
                " / ".join(f"{f[k]:,}" if isinstance(f[k], int) else f"{f[k]}" for k in key)
            )
        else:
            cells.append(f"{f[key]:,}" if isinstance(f[key], int) else f"{f[key]}")
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefetch", type=int, default=64)
    ap.add_argument("--variants", default="commit,send")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    variants = [variant(v, a.prefetch) for v in a.variants.split(",")]
    names = [f"{m}@{p}" for m, p in variants]
    data = tempfile.mkdtemp(prefix="cmq-stream-bench-")
    cluster = LocalCluster(Path(data) / "nodes", 3)
    cluster.start()
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    try:
        asyncio.run(cluster.ready(90))
        time.sleep(2)
        header = "| variant | " + " | ".join(c for c, _ in COLUMNS) + " |"
        print(header)
        print("|" + "---|" * (len(COLUMNS) + 1))
        for run in range(a.runs):
            for (mode, prefetch), name in zip(variants, names, strict=True):
                queue = "sc-" + uuid.uuid4().hex[:8]
                with SyncClient(cluster.urls, timeout=30) as client:
                    client.create_queue(queue, {})
                p0, e0 = raft_counters(cluster.urls)
                st = asyncio.run(j2(cluster.urls, queue, a.seconds, mode, prefetch))
                p1, e1 = raft_counters(cluster.urls)
                f = figures(st)
                f["commands_per_entry"] = round((p1 - p0) / max(1.0, e1 - e0), 2)
                results[name].append(f)
                print(row(f"{name} run {run + 1}", f), flush=True)
    finally:
        cluster.stop(30)
    print()
    print("medians:")
    medians: dict[str, dict[str, Any]] = {}
    for name in names:
        fs = results[name]
        if not fs:
            continue
        med = {
            k: statistics.median(f[k] for f in fs)
            for k, v in fs[0].items()
            if not isinstance(v, dict)
        }
        med = {k: round(v, 3) if isinstance(v, float) else v for k, v in med.items()}
        medians[name] = med
        print(row(name, med))
    base = names[0]
    for name in names[1:]:
        ratios = [
            r["acked_s"] / b["acked_s"]
            for r, b in zip(results[name], results[base], strict=False)
            if b["acked_s"]
        ]
        p99 = [
            r["e2e_p99_ms"] / b["e2e_p99_ms"]
            for r, b in zip(results[name], results[base], strict=False)
            if b["e2e_p99_ms"]
        ]
        each = ", ".join(f"{x:.2f}" for x in ratios)
        print(
            f"{name} / {base}: acked/s x{statistics.median(ratios):.2f} (runs {each}), "
            f"e2e p99 x{statistics.median(p99):.2f}"
        )
    if a.json:
        print(json.dumps({"runs": results, "medians": medians}))
    bad = any(f["missing"] or f["dups"] for fs in results.values() for f in fs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
