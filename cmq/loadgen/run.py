"""The ``cmq bench`` run itself: producers and consumers on one `cmq.client.Client` (one pooled
session, unlimited connections) on one event loop (uvloop when installed); every task owned by
a ``TaskGroup`` or awaited and cancelled by the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, Any, Final

from cmq.client import (
    NO_RETRY,
    Client,
    EntryResult,
    ReceivedMessage,
    RetryPolicy,
    ServerError,
    TransportError,
)
from cmq.client.retry import Safety, failure_of, retry_after_of
from cmq.client.stream import StreamClient, Subscription
from cmq.errors import CmqError, QueueAlreadyExists
from cmq.loadgen.body import Stamp, decode_body, encode_body, new_run_tag
from cmq.loadgen.measure import LatencyHistogram, SendSchedule, SeqTracker
from cmq.loadgen.report import (
    DEFAULT_MAX_MESSAGE_SIZE,
    LEFT_KEYS,
    BenchConfig,
    BenchReport,
    LatencySummary,
    ProgressSample,
    format_progress,
)

# -- the run (I/O) ---------------------------------------------------------------------------------
_MAX_ATTEMPTS: Final = 5
_MAX_RETRY_SLEEP: Final = 5.0
_POLICY: Final = RetryPolicy(attempts=_MAX_ATTEMPTS)
"""Which failures the run retries (`cmq.client.retry`); its own backoff is below."""
_MAX_ERROR_CODES: Final = 64
_RECV_WAIT_SECONDS: Final = 1
RECV_VISIBILITY_TIMEOUT: Final = 15
"""Seconds a received message stays leased (the bench acks at once; this bounds how long a
lease lost in transit hides its messages from the drain)."""
_CONSUMER_STOP_GRACE: Final = 10.0
_DRAIN_IDLE: Final = 3.0
"""Seconds without a delivery (and with empty receives) after which a drain ends as full."""


class BenchError(Exception):
    """The run could not start (bad settings, the queue could not be created)."""


class _Run:
    """One benchmark run's shared state; the tasks it starts all end before :meth:`run` does."""

    def __init__(
        self,
        cfg: BenchConfig,
        client: Client,
        queue: str,
        progress: IO[str] | None,
    ) -> None:
        self.cfg = cfg
        self.client = client
        """One attempt per call (`NO_RETRY`): the run retries itself, counting every error."""
        urls = cfg.urls
        if cfg.leader_direct:  # every node, starting at its own (one attempt: no failover)
            self._nodes = [client.derive(urls[i:] + urls[:i]) for i in range(len(urls))]
        else:
            self._nodes = [client.derive([u]) for u in urls]
        self.queue = queue
        self.progress_out = progress
        self.tag = new_run_tag()
        self.tracker = SeqTracker(cfg.producers)
        self.confirm_hist = LatencyHistogram()
        self.e2e_hist = LatencyHistogram()
        self.t0 = time.monotonic()
        self.schedule = SendSchedule(cfg.rate, self.t0) if cfg.rate else None
        self.budget = cfg.messages if cfg.messages else None
        self.sent = 0
        self.failed = 0
        self.resent = 0
        self.deliveries = 0
        self.acked = 0
        self.foreign = 0
        self.errors: dict[str, int] = {}
        self.phase = "run"
        self.last_confirm = self.t0
        self.last_ack = self.t0
        self.stop_producing = asyncio.Event()
        self.stop_consuming = asyncio.Event()
        self.settled_event = asyncio.Event()
        self.last_delivery = self.t0
        self.empty_since_delivery = 0
        self.queue_left: Mapping[str, Any] | None = None
        """The queue's stats when the drain found it empty or gave up."""
        self.producing = cfg.producers > 0
        self.interrupted = False

    # ---- bookkeeping
    def now(self) -> float:
        return time.monotonic() - self.t0

    def error(self, code: str) -> None:
        if code not in self.errors and len(self.errors) >= _MAX_ERROR_CODES:
            code = "other"
        self.errors[code] = self.errors.get(code, 0) + 1

    def total_errors(self) -> int:
        return sum(self.errors.values())

    def _check_settled(self) -> None:
        if not self.producing and self.tracker.missing == 0:
            self.settled_event.set()

    def node(self, i: int) -> Client:
        """The client of the ``i``-th node (round robin over the URLs; no failover). With
        ``leader_direct`` it knows every node, so it follows the queue's leader hint."""
        return self._nodes[i % len(self._nodes)]

    def stream(self, i: int) -> StreamClient:
        """A stream client of its own, first connected to the ``i``-th node (round robin over
        the URLs). With ``leader_direct`` it knows every node, starting at its own, so it follows
        the stream's leader hint (a connection to the queue's leader beside its first)."""
        urls = self.cfg.urls
        k = i % len(urls)
        mine = urls[k:] + urls[:k] if self.cfg.leader_direct else [urls[k]]
        return StreamClient(
            mine,
            timeout=self.cfg.request_timeout,
            window=self.cfg.window,
            leader_direct=self.cfg.leader_direct,
        )

    @staticmethod
    def _label(e: CmqError) -> str:
        """An error's name in the report: ``<status> <code>`` for an answer, ``timeout`` or
        the aiohttp error's name for a transport failure."""
        if isinstance(e, ServerError):
            return f"{e.status} {e.code}"
        if isinstance(e, TransportError):
            return e.reason
        return e.code

    async def _retry_or_stop(self, e: CmqError, safety: Safety, attempt: int) -> bool:
        """Count ``e``; sleep and return True if attempt ``attempt`` (1-based) may be retried
        (`cmq.client.retry` rules: never a send whose outcome is unknown)."""
        self.error(self._label(e))
        if not _POLICY.should_retry(failure_of(e), safety, attempt):
            return False
        retry_after = retry_after_of(e)
        await asyncio.sleep(min(retry_after or 0.1 * 2 ** (attempt - 1), _MAX_RETRY_SLEEP))
        return True

    # ---- producers
    def _claim(self) -> int:
        """Messages for the next request: ``batch``, or what is left of ``messages``."""
        n = self.cfg.batch
        if self.budget is not None:
            n = min(n, self.budget)
            self.budget -= n
        return n

    async def _send_loop(self, producer: int, node: Client | StreamClient) -> None:
        """One in-flight slot of ``producer``: send, await the answer, repeat until stopped."""
        cfg = self.cfg
        while not self.stop_producing.is_set():
            n = self._claim()
            if n == 0:
                return
            start = time.monotonic()
            if self.schedule is not None:
                # Open loop: latency counts from when the request was due, so a late start
                # (every slot busy) shows in the figures instead of lowering the load.
                due = self.schedule.claim(n)
                if due > start:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(due - start):
                            await self.stop_producing.wait()
                    if self.stop_producing.is_set():
                        return
                self.schedule.started(due, time.monotonic())
                start = due
            first = self.tracker.allocate(producer, n)
            sent_us = int((start - self.t0) * 1e6)
            bodies = [
                encode_body(Stamp(self.tag, producer, seq, sent_us), cfg.size)
                for seq in range(first, first + n)
            ]
            self.sent += n
            attempt = 0
            while True:
                attempt += 1
                try:
                    await node.send(self.queue, bodies)
                except CmqError as e:
                    # A send whose outcome is unknown is not resent (it could be stored
                    # twice); no retries once production has stopped (the run must end near
                    # its deadline).
                    if self.stop_producing.is_set() or not await self._retry_or_stop(
                        e, Safety.ONCE, attempt
                    ):
                        self.failed += n
                        break
                    self.resent += n
                    continue
                end = time.monotonic()
                self.confirm_hist.record(int((end - start) * 1e6), n)
                self.tracker.confirm(producer, first, n)
                self.last_confirm = end
                self._check_settled()
                break

    # ---- consumers
    def _took(self, got: Sequence[ReceivedMessage]) -> list[str]:
        """Account for delivered messages (duplicates, end-to-end latency); their receipts."""
        self.last_delivery = time.monotonic()
        self.empty_since_delivery = 0
        now_us = int((self.last_delivery - self.t0) * 1e6)
        receipts = []
        for m in got:
            self.deliveries += 1
            receipts.append(m.receipt)
            stamp = decode_body(m.body) if isinstance(m.body, str) else None
            first = (
                self.tracker.deliver(stamp.producer, stamp.seq)
                if stamp is not None and stamp.tag == self.tag
                else None
            )
            if first is None:
                self.foreign += 1
                continue
            if first and stamp is not None:
                self.e2e_hist.record(now_us - stamp.sent_us)
        return receipts

    async def _recv_loop(self, node: Client) -> None:
        cfg = self.cfg
        while not self.stop_consuming.is_set():
            try:
                got = await node.receive(
                    self.queue,
                    cfg.recv_batch,
                    visibility_timeout=RECV_VISIBILITY_TIMEOUT,
                    wait_seconds=_RECV_WAIT_SECONDS,
                )
            except CmqError as e:
                self.error(self._label(e))
                await asyncio.sleep(min(retry_after_of(e) or 0.2, _MAX_RETRY_SLEEP))
                continue
            if not got:
                self.empty_since_delivery += 1
                continue
            await self._ack(node, self._took(got))
            self._check_settled()

    async def _stream_consumer(self, stream: StreamClient) -> None:
        """One consumer on the streaming protocol: deliveries pushed within a credit of
        ``recv_batch`` x ``recv_window``, each batch acknowledged (up to ``recv_window`` acks
        in flight) and its credit granted back."""
        cfg = self.cfg
        acks = asyncio.Semaphore(cfg.recv_window)

        async def ack(got: list[ReceivedMessage], receipts: list[str], sub: Subscription) -> None:
            try:  # the first attempt grants the credit back as the ack is sent
                await self._ack(stream, receipts, first=lambda: sub.ack(got))
            finally:
                acks.release()
            self._check_settled()

        sub = await stream.subscribe(
            self.queue,
            prefetch=cfg.recv_batch * cfg.recv_window,
            visibility_timeout=RECV_VISIBILITY_TIMEOUT,
            max_batch=cfg.recv_batch,
        )
        async with asyncio.TaskGroup() as tg:
            while not self.stop_consuming.is_set():
                try:
                    async with asyncio.timeout(_RECV_WAIT_SECONDS):
                        got = await sub.next()
                except TimeoutError:
                    self.empty_since_delivery += 1
                    continue
                except CmqError as e:  # the subscription ended: open another
                    self.error(self._label(e))
                    await asyncio.sleep(min(retry_after_of(e) or 0.2, _MAX_RETRY_SLEEP))
                    await sub.close()
                    sub = await stream.subscribe(
                        self.queue,
                        prefetch=cfg.recv_batch * cfg.recv_window,
                        visibility_timeout=RECV_VISIBILITY_TIMEOUT,
                        max_batch=cfg.recv_batch,
                    )
                    continue
                receipts = self._took(got)
                await acks.acquire()
                tg.create_task(ack(got, receipts, sub))
        await sub.close()

    async def _ack(
        self,
        node: Client | StreamClient,
        receipts: list[str],
        first: Callable[[], Awaitable[list[EntryResult]]] | None = None,
    ) -> None:
        """Acknowledge ``receipts``, retrying what is safe to retry; ``first``: the first
        attempt instead of ``node.ack`` (a subscription's ack, which grants credit back)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                if attempt == 1 and first is not None:
                    results = await first()
                else:
                    results = await node.ack(self.queue, receipts)
            except CmqError as e:
                if await self._retry_or_stop(e, Safety.IDEMPOTENT, attempt):
                    continue
                return  # the leases expire and the messages come back: duplicates, counted
            for res in results:
                if res.ok:
                    self.acked += 1
                else:
                    self.error(f"ack {res.error or 'failed'}")
            self.last_ack = time.monotonic()
            return

    # ---- progress
    def sample(self) -> ProgressSample:
        return ProgressSample(
            at=self.now(),
            sent=self.sent,
            confirmed=self.tracker.confirmed,
            consumed=self.deliveries,
            errors=self.total_errors(),
            phase=self.phase,
        )

    async def _progress(self) -> None:
        out = self.progress_out
        if out is None:
            return
        tty = out.isatty()
        prev = self.sample()
        try:
            while True:
                await asyncio.sleep(1.0)
                cur = self.sample()
                line = format_progress(prev, cur)
                out.write(("\r" + line) if tty else (line + "\n"))
                out.flush()
                prev = cur
        finally:
            if tty:
                out.write("\n")
                out.flush()

    # ---- the whole run
    def _interrupt(self) -> None:
        """Ctrl-C: the first stops producing (then drain), the second stops the drain."""
        if not self.stop_producing.is_set():
            self.stop_producing.set()
        else:
            self.interrupted = True
            self.settled_event.set()

    async def _queue_stats(self) -> Mapping[str, Any] | None:
        """The queue's ``stats`` (visible, in_flight, delayed, ...), or None on any failure."""
        try:
            info = await self.node(0).get_queue(self.queue)
        except CmqError as e:
            self.error(f"stats {self._label(e)}")
            return None
        return dataclasses.asdict(info.stats)

    async def _drain(self) -> str:
        """Wait until every confirmed message was received (``complete``), the queue is empty
        (``empty``: no delivery for :data:`_DRAIN_IDLE` seconds and stats showing nothing
        visible, delayed or leased), the drain timeout (``timeout``), or a second Ctrl-C
        (``interrupted``). Leased messages keep the drain waiting: a lease lost in transit
        returns its messages after the visibility timeout."""
        start = time.monotonic()
        self._check_settled()
        next_stats = 0.0
        while not self.settled_event.is_set():
            now = time.monotonic()
            if now - start >= self.cfg.drain_timeout:
                self.queue_left = await self._queue_stats()
                return "timeout"
            idle = now - max(self.last_delivery, start) >= _DRAIN_IDLE
            if idle and self.empty_since_delivery and now >= next_stats:
                next_stats = now + 1.0
                stats = await self._queue_stats()
                if stats is not None and not any(
                    stats.get(k) for k in ("visible", "in_flight", "delayed")
                ):
                    self.queue_left = stats
                    return "empty"
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.1):
                    await self.settled_event.wait()
        return "interrupted" if self.interrupted else "complete"

    async def run(self) -> tuple[float, float, float, str]:
        """Produce, then drain; (produce s, consume s, drain s, drain result).

        Every task started here has ended (or was cancelled and awaited) when this returns."""
        cfg = self.cfg
        drain_seconds = 0.0
        drain_result = "skipped"
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        try:
            async with contextlib.AsyncExitStack() as streams, asyncio.TaskGroup() as tg:
                progress = tg.create_task(self._progress())
                if cfg.protocol == "stream":
                    consumers = [
                        tg.create_task(
                            self._stream_consumer(await streams.enter_async_context(self.stream(c)))
                        )
                        for c in range(cfg.consumers)
                    ]
                    senders: list[Client | StreamClient] = [
                        await streams.enter_async_context(self.stream(p))
                        for p in range(cfg.producers)
                    ]
                else:
                    consumers = [
                        tg.create_task(self._recv_loop(self.node(c)))
                        for c in range(cfg.consumers)
                        for _ in range(cfg.recv_window)
                    ]
                    senders = [self.node(p) for p in range(cfg.producers)]
                producers = [
                    tg.create_task(self._send_loop(p, senders[p]))
                    for p in range(cfg.producers)
                    for _ in range(cfg.window)
                ]
                stop_wait = tg.create_task(self.stop_producing.wait())
                # Production ends at the deadline, on Ctrl-C, or when a slot finds ``messages``
                # used up (every message is then claimed); the slots finish their requests in
                # flight.
                await asyncio.wait(
                    [*producers, stop_wait],
                    timeout=cfg.seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                self.stop_producing.set()
                await asyncio.gather(*producers, stop_wait)
                produced_at = self.now()
                self.producing = False
                if consumers and cfg.drain and cfg.producers:
                    self.phase = "drain"
                    drain_result = await self._drain()
                    drain_seconds = self.now() - produced_at
                self.stop_consuming.set()
                # Each loop ends after its current long poll and ack; one stuck past the grace
                # period is cancelled (its messages come back after their visibility timeout).
                if consumers:
                    _, stuck = await asyncio.wait(consumers, timeout=_CONSUMER_STOP_GRACE)
                    for t in stuck:
                        t.cancel()
                progress.cancel()
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
        produce_s = (self.last_confirm - self.t0) if self.tracker.confirmed else produced_at
        consume_s = self.last_ack - self.t0
        return produce_s, consume_s, drain_seconds, drain_result


async def run_bench(cfg: BenchConfig, progress: IO[str] | None = sys.stderr) -> BenchReport:
    """Run the benchmark described by ``cfg`` against a live cluster; the report.

    Creates the queue (``bench-<tag>`` unless ``cfg.queue``; an existing queue is used as it
    is) and deletes it at the end when this run created it, unless ``keep_queue``. Raises
    :class:`BenchError` when the queue cannot be created; every other failure is counted in
    the report's ``errors``.
    """
    cfg.validate()
    name = cfg.queue or f"bench-{new_run_tag()}"
    attributes: dict[str, Any] = {}
    if cfg.size > DEFAULT_MAX_MESSAGE_SIZE:
        attributes["max_message_size"] = cfg.size
    async with Client(
        cfg.urls,
        timeout=cfg.request_timeout,
        retry=NO_RETRY,
        connections=0,
        leader_direct=cfg.leader_direct,
    ) as client:
        first = client.derive([cfg.urls[0]])
        try:
            created = (await first.create_queue(name, attributes)).created
        except QueueAlreadyExists:  # it exists with other attributes: use it
            created = False
        except CmqError as e:
            raise BenchError(f"cannot create queue {name} at {first.urls[0]}: {e}") from e
        run = _Run(cfg, client, name, progress)
        produce_s, consume_s, drain_s, drain_result = await run.run()
        deleted = False
        if created and not cfg.keep_queue:
            try:
                await first.delete_queue(name)
                deleted = True
            except CmqError as e:
                run.error(f"delete queue {run._label(e)}")
    t = run.tracker
    checked = cfg.drain and cfg.consumers > 0 and cfg.producers > 0
    return BenchReport(
        queue=name,
        created_queue=created,
        deleted_queue=deleted,
        config=cfg,
        produce_seconds=produce_s,
        consume_seconds=consume_s,
        drain_seconds=drain_s,
        sent=run.sent,
        confirmed=t.confirmed,
        failed=run.failed,
        resent=run.resent,
        received=t.received,
        deliveries=run.deliveries,
        acked=run.acked,
        duplicates=t.duplicates,
        missing=t.missing if checked else None,
        drain_result=drain_result,
        left_in_queue=(
            {k: int(run.queue_left.get(k) or 0) for k in LEFT_KEYS}
            if run.queue_left is not None
            else None
        ),
        unconfirmed_received=t.unconfirmed_received,
        foreign=run.foreign,
        errors=dict(run.errors),
        confirm_latency=LatencySummary.of(run.confirm_hist),
        e2e_latency=LatencySummary.of(run.e2e_hist),
        schedule_lag=run.schedule.max_lag if run.schedule is not None else None,
    )
