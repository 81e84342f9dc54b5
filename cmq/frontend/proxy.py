"""A node's `QueueService` used from another process of the same host: `ServiceServer` runs in
the node process, `ServiceProxy` in a front-end HTTP worker (``cmq serve --http-workers N``,
`cmq.cli.server`), so HTTP parsing, JSON and validation run beside the Raft loop instead of on it.

Contract: a method of the proxy behaves as the node's method of the same name: the same result,
the same `CmqError` (code, message, ``retry_after``) raised, and the same guarantees, because
the call runs there. Cancelling a proxy call (a client that went away from a long poll)
cancels the call in the node process too, so an abandoned receive leases nothing. A call
whose node process goes away before it answers ends `OutcomeUnknown`. ``is_ready`` and
``status`` (synchronous in the protocol) answer from a copy refreshed every `STATE_SECONDS`;
`ServiceProxy.node_metrics`, the node's Prometheus text, from a copy refreshed every
`METRICS_SECONDS` while the front end's ``/metrics`` is scraped (within `METRICS_IDLE_AFTER`
of the last scrape, and once at the start; the node renders once a second for all its front
ends), so an unscraped cluster does not pay for rendering thousands of queue series
(`NodeMetricsCollector` adds the copy to a front end's own registry).
`read_segment` and `read_segment_data` are carried whole: the node reads the segment to its end
(or to its damage, raised after the records or bytes before it) before the proxy streams it.

Wire: typed MessagePack frames, one `cmq.frontend.base.Call` per service method (see there,
with its version). Nothing is unpickled. The socket file is readable by its owner alone (mode
0600 inside the node's data directory). A frame that does not decode to what its side expects
is `UnreadableFrame` naming what was found: the connection is dropped and that is logged (the
proxy's pending calls end `OutcomeUnknown` with the reason), never a bare traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from cmq.errors import CmqError, OutcomeUnknown, Unavailable, UnreadableFrame
from cmq.frontend import base, calls, key_calls, wire
from cmq.frontend.hints import leader_from_status
from cmq.frontend.keys import KeyCopyRing
from cmq.segment_values import (
    SegmentData,
    SegmentStream,
)
from cmq.service import QueueService

log = logging.getLogger("cmq.frontend.proxy")

R = TypeVar("R")
T = TypeVar("T")
P = ParamSpec("P")
MAX_INFLIGHT = 4096
"""Calls one connection may have running in the node process at once; more wait to be read."""
STATE_SECONDS = 0.2
"""How often a proxy refreshes its copy of ``is_ready`` and ``status``."""
METRICS_SECONDS = 1.0
"""How often a proxy refreshes its copy of the node's metrics (when the node exports them)."""
METRICS_IDLE_AFTER = 120.0
"""A proxy stops refreshing that copy this long after its ``/metrics`` was last scraped."""


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    """The next frame's version byte and body."""
    (size,) = wire.HEAD.unpack(await reader.readexactly(wire.HEAD.size))
    if size > wire.MAX_FRAME:
        raise ConnectionError(f"frame of {size} bytes")
    return await reader.readexactly(size)


def _forwarded(
    method: Callable[Concatenate[QueueService, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[ServiceProxy, P], Coroutine[Any, Any, T]]:
    """``method`` of `QueueService` as a method of `ServiceProxy`: its arguments become its
    `cmq.frontend.calls` struct (``CALLS[method.__name__]``), run in the node process; the
    same parameters, the same result (each such method of the proxy is this one line)."""
    call = calls.CALLS[method.__name__]

    @functools.wraps(method)
    async def forward(self: ServiceProxy, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await self._call(call(*args, **kwargs))
        return result

    return forward


class ServiceServer:
    """Serves ``service`` on the Unix socket ``path`` until `close`."""

    def __init__(
        self,
        service: QueueService,
        path: str,
        metrics: Callable[[], Awaitable[bytes]] | None = None,
        keys: key_calls.NodeKeys | None = None,
    ) -> None:
        """``metrics``: the node's metrics in Prometheus text format (None: none exported).
        ``keys``: the node's key ring and key administration, which the key calls
        (`cmq.frontend.key_calls`) are answered from (None: anonymous access, they are
        `Unavailable`)."""
        self.service = service
        self.path = path
        self.metrics = metrics
        self.keys = keys
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._accept, self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._connection(reader, writer)
        finally:
            self._connections.discard(task)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        running: dict[int, asyncio.Task[None]] = {}
        room = asyncio.Semaphore(MAX_INFLIGHT)

        def done(rid: int) -> Callable[[asyncio.Task[None]], None]:
            def forget(_: asyncio.Task[None]) -> None:
                running.pop(rid, None)
                room.release()

            return forget

        try:
            while True:
                rid, call = wire.decode_request(await _read_frame(reader))
                if call is None:
                    task = running.get(rid)
                    if task is not None:
                        task.cancel()
                    continue
                await room.acquire()
                task = asyncio.create_task(self._run(writer, rid, call))
                running[rid] = task
                task.add_done_callback(done(rid))
        except (asyncio.IncompleteReadError, ConnectionError):
            # The front end went away: what it still waits for has no one to answer.
            log.info("a front end closed its connection; cancelling its %d calls", len(running))
        except UnreadableFrame as e:
            log.error(
                "a front end's request could not be read, dropping its connection: %s",
                e,
                extra={"event": "front_end_failed"},
            )
        except Exception:  # a bug, not the peer: the connection is dropped, loudly
            log.exception(
                "a front end's connection failed; dropping it", extra={"event": "front_end_failed"}
            )
        finally:
            for task in list(running.values()):
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
            writer.close()

    async def _run(self, writer: asyncio.StreamWriter, rid: int, call: calls.AnyCall) -> None:
        try:
            answer = await self._answer(rid, call)
        except CmqError as e:
            answer = wire.encode_failure(rid, e)
        except Exception as e:  # reported to the caller, never swallowed silently
            log.exception(
                "front-end call %s failed", call.METHOD, extra={"event": "request_failed"}
            )
            answer = wire.encode_failure(rid, CmqError(f"internal error: {type(e).__name__}"))
        if not writer.is_closing():
            writer.write(answer)

    async def _answer(self, rid: int, call: base.Call[Any]) -> bytes:
        if isinstance(call, calls.Metrics):
            text = b"" if self.metrics is None else await self.metrics()
            return wire.encode_answer(rid, call, text)
        if isinstance(call, key_calls.KEY_CALLS):
            if self.keys is None:
                raise Unavailable("this node serves anonymous requests: it has no access keys")
            if isinstance(call, key_calls.CopyKeys):
                return wire.encode_answer(rid, call, call.serve(self.keys))
            result: Any = await call.serve(self.keys)
            return wire.encode_answer(rid, call, result)
        return wire.encode_answer(rid, call, await call.run(self.service))


class ServiceProxy(QueueService):
    """The `QueueService` of the node serving ``path``; `connect` before use, `close` after.
    With ``signed``, `keys` is a copy of the node's key ring (`cmq.frontend.keys`), taken at
    `connect` and kept up to date until `close`."""

    def __init__(self, path: str, *, signed: bool = False) -> None:
        self.path = path
        self.keys = KeyCopyRing(self.call) if signed else None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._state_task: asyncio.Task[None] | None = None
        self._keys_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[base.Call[Any], asyncio.Future[Any]]] = {}
        self._next = 0
        self._ready = False
        self._status: dict[str, Any] = {}
        self._lost: str | None = None
        self.node_metrics = b""
        """The node's metrics text as last fetched (empty until then, or when it has none)."""
        self.metrics_scraped = time.monotonic()
        """When this front end's ``/metrics`` last read `node_metrics` (`NodeMetricsCollector`)."""

    async def connect(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(self.path)
        self._reader_task = asyncio.create_task(self._read(reader))
        await self._refresh_state()
        self._state_task = asyncio.create_task(self._refresh())
        if self.keys is not None:
            await self.keys.refresh()
            self._keys_task = asyncio.create_task(self.keys.keep())

    async def close(self) -> None:
        if self.keys is not None:
            self.keys.close()
        for task in (self._keys_task, self._state_task, self._reader_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._writer is not None:
            self._writer.close()
        self._fail("the front end is closing")

    @property
    def lost(self) -> str | None:
        """Why the connection to the node process ended (None while it lasts)."""
        return self._lost

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                rid, ok, payload = wire.decode_answer(await _read_frame(reader))
                call, fut = self._pending.pop(rid, (None, None))
                if call is None or fut is None or fut.done():
                    continue
                if ok:
                    fut.set_result(call.decode_result(payload))
                else:
                    fut.set_exception(wire.decode_failure(payload))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            self._fail(f"the node process went away ({type(e).__name__})")
        except UnreadableFrame as e:
            log.error(
                "front-end connection to the node dropped: %s",
                e,
                extra={"event": "front_end_failed"},
            )
            self._fail(f"the node's answer could not be read: {e}")
        except Exception as e:  # a bug, not the node: nothing after it can be trusted
            log.exception(
                "front-end connection to the node failed", extra={"event": "front_end_failed"}
            )
            self._fail(f"the node's answer could not be read ({type(e).__name__})")

    def _fail(self, why: str) -> None:
        self._lost = self._lost or why
        self._ready = False
        pending, self._pending = self._pending, {}
        for _, fut in pending.values():
            if not fut.done():
                fut.set_exception(OutcomeUnknown(why))

    async def _refresh_state(self) -> None:
        state = await self._call(calls.State())
        self._ready, self._status = state.ready, state.status

    async def _refresh(self) -> None:
        every = max(1, round(METRICS_SECONDS / STATE_SECONDS))
        for turn in itertools.count():
            if self._lost is not None:
                return
            with contextlib.suppress(CmqError):
                scraped = time.monotonic() - self.metrics_scraped < METRICS_IDLE_AFTER
                if turn % every == 0 and (scraped or turn == 0):
                    self.node_metrics = await self._call(calls.Metrics())
                await asyncio.sleep(STATE_SECONDS)
                await self._refresh_state()

    def call(self, call: base.Call[R]) -> Awaitable[R]:
        """Run ``call`` in the node process (what the key ring's copy asks the node)."""
        return self._call(call)

    async def _call(self, call: base.Call[R]) -> R:
        if self._lost is not None or self._writer is None:
            raise Unavailable(self._lost or "the front end is not connected")
        self._next += 1
        rid = self._next
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (call, fut)
        self._writer.write(wire.encode_request(rid, call))
        try:
            return await fut
        except asyncio.CancelledError:
            if self._pending.pop(rid, None) is not None and not self._writer.is_closing():
                self._writer.write(wire.encode_request(rid, None))
            raise

    # -- QueueService ------------------------------------------------------------------------------
    def is_ready(self) -> bool:
        return self._ready and self._lost is None

    def status(self) -> dict[str, Any]:
        return self._status

    def leader_http(self, name: str) -> str:
        """The leader hint for queue ``name`` (`cmq.frontend.hints.leader_from_status` on the
        status copy): what the front end's answers name in ``Cmq-Leader``; dict lookups only."""
        return leader_from_status(self._status, name)

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        return (await self._call(calls.ReadSegment(name, first_seq))).stream()

    async def read_segment_data(self, name: str, first_seq: int) -> SegmentData:
        return (await self._call(calls.ReadSegmentData(name, first_seq))).stream()

    # Every other call crosses as it is: its `cmq.frontend.calls` struct, its result.
    create_queue = _forwarded(QueueService.create_queue)
    list_queues = _forwarded(QueueService.list_queues)
    get_queue = _forwarded(QueueService.get_queue)
    peek = _forwarded(QueueService.peek)
    set_attributes = _forwarded(QueueService.set_attributes)
    delete_queue = _forwarded(QueueService.delete_queue)
    queue_metadata = _forwarded(QueueService.queue_metadata)
    update_metadata = _forwarded(QueueService.update_metadata)
    purge = _forwarded(QueueService.purge)
    rewind = _forwarded(QueueService.rewind)
    send = _forwarded(QueueService.send)
    send_each = _forwarded(QueueService.send_each)
    receive = _forwarded(QueueService.receive)
    ack = _forwarded(QueueService.ack)
    change_visibility = _forwarded(QueueService.change_visibility)
    nack = _forwarded(QueueService.nack)
    list_segments = _forwarded(QueueService.list_segments)
    claim_segments = _forwarded(QueueService.claim_segments)
    mark_archived = _forwarded(QueueService.mark_archived)
    group_digest = _forwarded(QueueService.group_digest)
    export_catalog = _forwarded(QueueService.export_catalog)
    import_catalog = _forwarded(QueueService.import_catalog)
    export_messages = _forwarded(QueueService.export_messages)
    import_messages = _forwarded(QueueService.import_messages)
    list_nodes = _forwarded(QueueService.list_nodes)
    join_node = _forwarded(QueueService.join_node)
    drain_node = _forwarded(QueueService.drain_node)
    activate_node = _forwarded(QueueService.activate_node)
    remove_node = _forwarded(QueueService.remove_node)
    set_groups = _forwarded(QueueService.set_groups)
    list_features = _forwarded(QueueService.list_features)
    enable_features = _forwarded(QueueService.enable_features)


class NodeMetricsCollector(Collector):
    """A Prometheus collector yielding ``proxy``'s copy of the node's metrics, so a front
    end's ``/metrics`` shows the node's (Raft, WAL, queues, process) beside its own HTTP ones."""

    def __init__(self, proxy: ServiceProxy) -> None:
        self.proxy = proxy

    def collect(self) -> Iterator[Metric]:
        self.proxy.metrics_scraped = time.monotonic()
        yield from text_string_to_metric_families(self.proxy.node_metrics.decode())
