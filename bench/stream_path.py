"""Where a pushed message spends its time on the stream's path, leg by leg, with timestamps on
the server's side that `bench/stream_consumers.py` cannot take from a client:

    python bench/stream_path.py [--messages 20000] [--rounds 3] [--prefetch 64]

One `QueueNode` in this process (one group, a real data directory: every lease and ack is an
fdatasync'd Raft commit, on one node instead of a majority), the real app (`api.app.make_app`,
`api.stream`) on a loopback port, and 2 `StreamClient` consumers draining a preloaded queue of
1 KiB messages (batches of at most 32, at most 4 acks in flight each), credit back after the
ack's commit (``commit``) and as the ack is sent (``send``), alternated per round. A drain, so a
lease never long-polls an empty queue: its time is its commit. Per leg, the median and p99 per
message (ms):

* ``lease``: the service's receive call (propose, commit, apply, receipts);
* ``to writer``: lease returned to the writer encoding its frame (`Delivered` objects, the
  connection's answer queue);
* ``render``: `cmq.stream.encode` of the WebSocket message carrying it;
* ``send``: the server's ``send_bytes`` of that message;
* ``client``: sent to the consumer holding it (socket, decode, dispatch, the consumer's wake);
* ``ack``: the service's ack call (its commit), and ``ack rtt`` as the consumer sees it;
* ``refill``: an ack call started to the consumer's next delivery (the credit's way back and
  round: ack commit or not, then the next lease and the legs above).

The timestamps wrap the service and `api.stream`'s encoder and the server socket's
``send_bytes`` in this process only (nothing of the product is changed).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from one_node import one_node_config  # this script's neighbour in bench/

import api.stream
from api.app import make_app
from cmq.cli.launch import free_ports
from cmq.client.stream import StreamClient
from cmq.client.types import ReceivedMessage
from cmq.model import EntryResult, OutgoingMessage, QueueAttributes
from cmq.model import ReceivedMessage as Leased
from cmq.node.queue_node import QueueNode
from cmq.stream import Deliver

BODY = b"x" * 1024
MAX_BATCH = 32
ACKS_IN_FLIGHT = 4
CONSUMERS = 2


class Stamps:
    """Per receipt: when its lease returned, its frame was encoded and sent."""

    def __init__(self) -> None:
        self.leased: dict[str, float] = {}
        self.encoded: dict[str, tuple[float, float]] = {}
        self.sent: dict[str, float] = {}
        self.lease: list[float] = []
        self.ack: list[float] = []
        self.send_s: list[float] = []
        self._last: list[str] = []


class TimedService:
    """The node's service with its receive and ack timed (everything else passed through)."""

    def __init__(self, node: QueueNode, stamps: Stamps) -> None:
        self.node = node
        self.stamps = stamps

    def __getattr__(self, name: str) -> Any:
        return getattr(self.node, name)

    async def receive(self, name: str, n: int, vis: int | None, wait: int | None) -> list[Leased]:
        t0 = time.perf_counter()
        got = await self.node.receive(name, n, vis, wait)
        t1 = time.perf_counter()
        if got:
            self.stamps.lease.extend([t1 - t0] * len(got))
            for m in got:
                self.stamps.leased[m.receipt] = t1
        return got

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        t0 = time.perf_counter()
        out = await self.node.ack(name, receipts)
        self.stamps.ack.extend([time.perf_counter() - t0] * len(receipts))
        return out


def instrument(stamps: Stamps) -> None:
    """Time `api.stream`'s encoder and the server socket's send (this process only)."""
    encode = api.stream.encode

    def timed_encode(frames: Any) -> bytes:
        t0 = time.perf_counter()
        data = encode(frames)
        t1 = time.perf_counter()
        receipts = [m.receipt for f in frames if isinstance(f, Deliver) for m in f.messages]
        for r in receipts:
            stamps.encoded[r] = (t0, t1)
        stamps._last = receipts
        return data

    api.stream.encode = timed_encode  # type: ignore[assignment]
    send_bytes = web.WebSocketResponse.send_bytes

    async def timed_send(self: web.WebSocketResponse, data: bytes, *a: Any, **k: Any) -> None:
        receipts, stamps._last = stamps._last, []
        t0 = time.perf_counter()
        await send_bytes(self, data, *a, **k)
        t1 = time.perf_counter()
        if receipts:
            stamps.send_s.extend([t1 - t0] * len(receipts))
        for r in receipts:
            stamps.sent[r] = t1

    web.WebSocketResponse.send_bytes = timed_send  # type: ignore[method-assign]


async def drain(
    url: str, queue: str, total: int, mode: str, prefetch: int
) -> dict[str, list[float]]:
    legs: dict[str, list[float]] = {"arrive": [], "ack_rtt": [], "refill": []}
    arrived: dict[str, float] = {}
    done = asyncio.Event()
    count = 0

    async def consumer() -> None:
        nonlocal count
        async with StreamClient(url) as c:
            sub = await c.subscribe(
                queue, prefetch=prefetch, visibility_timeout=120, max_batch=MAX_BATCH
            )
            slots = asyncio.Semaphore(ACKS_IN_FLIGHT)
            tasks: set[asyncio.Task[None]] = set()
            last_ack: list[float] = []

            async def ack(batch: list[ReceivedMessage]) -> None:
                t0 = time.perf_counter()
                last_ack.append(t0)
                try:
                    if mode == "send":
                        await sub.ack(batch)
                    else:
                        await c.ack(queue, [m.receipt for m in batch])
                        await sub.grant(len(batch))
                    legs["ack_rtt"].extend([time.perf_counter() - t0] * len(batch))
                finally:
                    slots.release()

            while not done.is_set():
                try:
                    batch = await asyncio.wait_for(sub.next(), 1.0)
                except TimeoutError:
                    continue
                now = time.perf_counter()
                if last_ack:
                    legs["refill"].append(now - last_ack.pop(0))
                for m in batch:
                    arrived[m.receipt] = now
                count += len(batch)
                if count >= total:
                    done.set()
                await slots.acquire()
                task = asyncio.get_running_loop().create_task(ack(batch))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks, timeout=30)
            await sub.close()

    await asyncio.gather(*(consumer() for _ in range(CONSUMERS)))
    legs["arrive"] = list(arrived.values())
    legs["receipts"] = list(arrived)  # type: ignore[arg-type]
    return legs


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


async def run(messages: int, rounds: int, prefetch: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="cmq-stream-path-"))
    node = QueueNode(one_node_config(root, b"stream-path-bench-secret-0123456"))
    await node.start()
    stamps = Stamps()
    instrument(stamps)
    runner = web.AppRunner(make_app(TimedService(node, stamps)))  # type: ignore[arg-type]
    await runner.setup()
    port = free_ports(1)[0]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    try:
        while not node.is_ready():
            await asyncio.sleep(0.05)
        rows: dict[str, list[dict[str, float]]] = {"commit": [], "send": []}
        for r in range(rounds):
            for mode in ("commit", "send") if r % 2 == 0 else ("send", "commit"):
                queue = f"path-{mode}-{r}"
                await node.create_queue(queue, QueueAttributes())
                for _ in range(0, messages, 100):
                    await node.send(queue, [OutgoingMessage(BODY) for _m in range(100)])
                for store in (stamps.lease, stamps.ack, stamps.send_s):
                    store.clear()
                stamps.leased.clear()
                stamps.encoded.clear()
                stamps.sent.clear()
                t0 = time.perf_counter()
                legs = await drain(url, queue, messages, mode, prefetch)
                took = time.perf_counter() - t0
                receipts: list[str] = legs.pop("receipts")  # type: ignore[assignment]
                to_writer, render, client = [], [], []
                for rc, t_arr in zip(receipts, legs["arrive"], strict=True):
                    if rc in stamps.leased and rc in stamps.encoded and rc in stamps.sent:
                        e0, e1 = stamps.encoded[rc]
                        to_writer.append(e0 - stamps.leased[rc])
                        render.append(e1 - e0)
                        client.append(t_arr - stamps.sent[rc])
                f = {
                    "msgs/s": messages / took,
                    "lease": statistics.median(stamps.lease) * 1e3,
                    "lease99": pct(stamps.lease, 99) * 1e3,
                    "to writer": statistics.median(to_writer) * 1e3,
                    "render": statistics.median(render) * 1e3,
                    "send": statistics.median(stamps.send_s) * 1e3,
                    "client": statistics.median(client) * 1e3,
                    "client99": pct(client, 99) * 1e3,
                    "ack": statistics.median(stamps.ack) * 1e3,
                    "ack rtt": statistics.median(legs["ack_rtt"]) * 1e3,
                    "refill": statistics.median(legs["refill"]) * 1e3,
                }
                rows[mode].append(f)
                print(
                    f"round {r + 1} {mode}: " + ", ".join(f"{k} {v:.2f}" for k, v in f.items()),
                    flush=True,
                )
        print("\nmedians over rounds (ms per message; msgs/s):")
        for mode, fs in rows.items():
            med = {k: statistics.median(f[k] for f in fs) for k in fs[0]}
            print(f"{mode}@{prefetch}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    finally:
        await runner.cleanup()
        await node.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefetch", type=int, default=64)
    a = ap.parse_args()
    asyncio.run(run(a.messages, a.rounds, a.prefetch))


if __name__ == "__main__":
    main()
