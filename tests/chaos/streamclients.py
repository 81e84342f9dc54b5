"""The ``stream`` surface of a chaos run: a producer with windowed confirms and a push consumer
on the streaming protocol (`cmq.client.stream.StreamClient`, one WebSocket each), on the queue
`tests.chaos.surfaces.STREAM_QUEUE`, recorded in the history like the HTTP clients.

* Producer (``stream-producer-0``): its n-th round puts 1-8 sends of 1-5 messages (dedup id =
  key) on the connection at once (many unconfirmed sends: the window) and records each send as
  its own op from the moment it was issued to its confirm. An unknown outcome is resent once
  with the same ids half of the time (the client reconnects to the next node by itself).
* Consumer (``stream-consumer-0``): its n-th turn subscribes with a seeded prefetch, visibility
  and batch size, takes what is pushed for 1-2 s and closes the subscription. Each pushed batch
  is recorded as a ``receive`` op whose start is the turn's subscribe (its leases were stamped
  after that: resubscribing after a reconnect happens later still) and whose end is its
  arrival; so the lease windows the checker derives are sure, only shorter. Messages are then
  acked or nacked (recorded) by their fate, and the credit granted back. Batches pushed before
  the close took effect are taken (and recorded) after it. A subscription the server ends (an
  error frame) is recorded as a receive that failed, with the error.

The producer's ops record node 0 (its client rotates over the URLs on reconnect); the
consumer's record the node its connection was open to when the batch was taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from cmq.client import Message
from cmq.client.stream import StreamClient, Subscription
from cmq.errors import CmqError
from tests.chaos.history import Delivery
from tests.chaos.surfaces import STREAM_QUEUE

if TYPE_CHECKING:
    from tests.chaos.workload import Workload


async def _raise(e: CmqError) -> None:
    """An awaitable raising ``e``: classified like a call (`Recorder.call`)."""
    raise e


class StreamClients:
    """The stream producer and push consumer of one run (module doc)."""

    def __init__(self, workload: Workload) -> None:
        self.w = workload
        urls = [workload.urls[n] for n in sorted(workload.urls)]
        timeout = workload.cfg.request_timeout
        self.producer = StreamClient(urls, timeout=timeout, window=64)
        self.consumer = StreamClient(urls, timeout=timeout, window=64)

    def node(self) -> int:
        """The node the consumer's subscription's connection is open to (leader-direct may have
        moved it off the first connection), else its first connection's (0 when none)."""
        subs = list(self.consumer._subs.values())
        conn = subs[0].conn if subs and subs[0].conn is not None else self.consumer._conn
        url = conn.url if conn is not None else ""
        return next((n for n, u in self.w.urls.items() if u == url), 0)

    async def close(self) -> None:
        await self.producer.close()
        await self.consumer.close()

    async def _send(self, process: str, batch: int, part: int, keys: list[str]) -> None:
        client = self.w.client
        assert client is not None
        messages = [Message(self.w.body(k), dedup_id=k) for k in keys]
        for attempt in range(2):
            op = client.begin(process, "send", STREAM_QUEUE, 0)
            op.keys = list(keys)
            outcome, _, detail = await client.call(self.producer.send(STREAM_QUEUE, messages))
            client.end(op, outcome, detail)
            if outcome == "ok":
                return
            await asyncio.sleep(0.05)
            resend = self.w.choices(process, batch, part, attempt).random() < 0.5
            if outcome == "failed" and not detail.startswith("connect"):
                return
            if not resend:
                return

    async def produce(self) -> None:
        """Rounds of concurrent sends until the producers stop."""
        process = "stream-producer-0"
        batch = 0
        while self.w.producing:
            batch += 1
            rng = self.w.choices(process, batch)
            sends = [
                [f"{self.w.tag}-sp-{batch}-{i}-{k}" for k in range(rng.randint(1, 5))]
                for i in range(rng.randint(1, 8))
            ]
            await asyncio.gather(*(self._send(process, batch, i, ks) for i, ks in enumerate(sends)))
            await asyncio.sleep(rng.uniform(0.05, 0.15))

    async def consume(self) -> None:
        """Subscription turns until the consumers stop."""
        process = "stream-consumer-0"
        turn = 0
        while self.w.consuming:
            turn += 1
            rng = self.w.choices(process, turn)
            draining = self.w.draining
            vis = 10 if draining else rng.choice(self.w.cfg.visibilities)
            prefetch = rng.randint(4, 32)
            max_batch = rng.randint(1, 8)
            hold = 1.5 if draining else rng.uniform(1.0, 2.0)
            start = time.monotonic()
            try:
                async with asyncio.timeout(self.w.cfg.request_timeout):
                    sub = await self.consumer.subscribe(
                        STREAM_QUEUE, prefetch=prefetch, visibility_timeout=vis, max_batch=max_batch
                    )
            except (CmqError, TimeoutError):
                await asyncio.sleep(0.2)
                continue
            got_any = await self._turn(process, sub, start, vis, start + hold)
            with contextlib.suppress(CmqError, TimeoutError):
                async with asyncio.timeout(self.w.cfg.request_timeout):
                    await sub.close()
            # Batches pushed before the close took effect are still handed over: take them.
            got_any = await self._turn(process, sub, start, vis, time.monotonic() + 0.3) or got_any
            if got_any:
                self.w.empty_receives = 0
            else:
                self.w.empty_receives += 1

    async def _turn(
        self, process: str, sub: Subscription, start: float, vis: int, until: float
    ) -> bool:
        """Take what ``sub`` pushes until ``until`` (monotonic), recording each batch as a
        receive that began at ``start`` (the subscribe), settling it by fate."""
        client = self.w.client
        assert client is not None
        got_any = False
        while (left := until - time.monotonic()) > 0:
            try:
                batch = await asyncio.wait_for(sub.next(), left)
            except TimeoutError:
                break
            except CmqError as e:  # the subscription ended: recorded, with the server's reason
                op = self.w.history.invoke(process, "receive", STREAM_QUEUE, self.node(), start)
                outcome, _, detail = await client.call(_raise(e))
                self.w.history.complete(op, time.monotonic(), outcome, f"subscription: {detail}")
                break
            got_any = True
            op = self.w.history.invoke(process, "receive", STREAM_QUEUE, self.node(), start)
            op.visibility = float(vis)
            op.deliveries = [
                Delivery(self.w.key_of(str(m.body)), m.seq, m.receipt, m.receive_count)
                for m in batch
            ]
            self.w.history.complete(op, time.monotonic(), "ok")
            fates = [self.w.fate(STREAM_QUEUE, d) for d in op.deliveries]
            for kind in ("ack", "nack"):
                chosen = [d for d, f in zip(op.deliveries, fates, strict=True) if f == kind]
                if not chosen:
                    continue
                settle = client.begin(process, kind, STREAM_QUEUE, self.node())
                settle.receipts = [d.receipt for d in chosen]
                settle.keys = [d.key for d in chosen]
                call = (
                    self.consumer.ack(STREAM_QUEUE, settle.receipts)
                    if kind == "ack"
                    else self.consumer.nack(STREAM_QUEUE, settle.receipts, 0)
                )
                outcome, results, detail = await client.call(call)
                if results is not None:
                    settle.entry_ok = [r.ok for r in results]
                    detail = ",".join(sorted({r.error or "" for r in results} - {""}))
                client.end(settle, outcome, detail)
            try:
                async with asyncio.timeout(self.w.cfg.request_timeout):
                    await sub.grant(len(batch))
            except (CmqError, TimeoutError):
                break
        return got_any
