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
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal, TypeVar, overload

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from cmq.errors import CmqError, OutcomeUnknown, Unavailable, UnreadableFrame
from cmq.export_values import ExportPage, ImportedMessage
from cmq.frontend import base, calls, key_calls, wire
from cmq.frontend.hints import leader_from_status
from cmq.frontend.keys import KeyCopyRing
from cmq.model import (
    EntryResult,
    GroupDigest,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SendRefused,
    SentMessage,
)
from cmq.segment_values import (
    ArchiveResult,
    ClaimResult,
    SegmentData,
    SegmentListing,
    SegmentStream,
)
from cmq.service import QueueService

log = logging.getLogger("cmq.frontend.proxy")

R = TypeVar("R")
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

    async def create_queue(self, name: str, attributes: QueueAttributes) -> bool:
        return await self._call(calls.CreateQueue(name, attributes))

    async def list_queues(self) -> list[str]:
        return await self._call(calls.ListQueues())

    async def get_queue(self, name: str) -> tuple[QueueAttributes, QueueStats]:
        return await self._call(calls.GetQueue(name))

    async def peek(self, name: str, limit: int) -> list[PeekedMessage]:
        return await self._call(calls.Peek(name, limit))

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        return await self._call(calls.SetAttributes(name, changes))

    async def delete_queue(self, name: str) -> None:
        await self._call(calls.DeleteQueue(name))

    async def queue_metadata(self, name: str) -> dict[str, str]:
        return await self._call(calls.QueueMetadata(name))

    async def update_metadata(
        self, name: str, changes: dict[str, str], unset: list[str]
    ) -> dict[str, str]:
        return await self._call(calls.UpdateMetadata(name, changes, unset))

    async def purge(self, name: str) -> int:
        return await self._call(calls.Purge(name))

    async def rewind(self, name: str, since_ms: int) -> int:
        return await self._call(calls.Rewind(name, since_ms))

    @overload
    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]: ...

    @overload
    async def send(
        self, name: str, messages: list[OutgoingMessage], *, per_entry: Literal[True]
    ) -> list[SentMessage | SendRefused]: ...

    async def send(
        self, name: str, messages: list[OutgoingMessage], *, per_entry: bool = False
    ) -> list[SentMessage] | list[SentMessage | SendRefused]:
        got = await self._call(calls.Send(name, messages, per_entry))
        if per_entry:
            return got
        return [s for s in got if isinstance(s, SentMessage)]

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait_seconds: int | None,
        *,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        call = calls.Receive(name, max_messages, visibility_timeout, wait_seconds, attempt_id)
        return await self._call(call)

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        return await self._call(calls.Ack(name, receipts))

    async def change_visibility(
        self, name: str, entries: list[tuple[str, int]]
    ) -> list[EntryResult]:
        return await self._call(calls.ChangeVisibility(name, entries))

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        return await self._call(calls.Nack(name, receipts, delay_seconds))

    async def list_segments(self, name: str, state: str = "all") -> SegmentListing:
        return await self._call(calls.ListSegments(name, state))

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        return (await self._call(calls.ReadSegment(name, first_seq))).stream()

    async def read_segment_data(self, name: str, first_seq: int) -> SegmentData:
        return (await self._call(calls.ReadSegmentData(name, first_seq))).stream()

    async def claim_segments(
        self, name: str, batch_id: str, segments: list[int], ttl_ms: int
    ) -> ClaimResult:
        return await self._call(calls.ClaimSegments(name, batch_id, segments, ttl_ms))

    async def mark_archived(self, name: str, batch_id: str, segments: list[int]) -> ArchiveResult:
        return await self._call(calls.MarkArchived(name, batch_id, segments))

    async def group_digest(self, group: int) -> GroupDigest:
        return await self._call(calls.GroupDigest(group))

    async def export_catalog(self) -> dict[str, Any]:
        return await self._call(calls.ExportCatalog())

    async def import_catalog(
        self, keys: list[Any], metadata: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        return await self._call(calls.ImportCatalog(keys, metadata))

    async def export_messages(self, name: str, after: int, upto: int, limit: int) -> ExportPage:
        return await self._call(calls.ExportMessages(name, after, upto, limit))

    async def import_messages(
        self, name: str, messages: list[ImportedMessage], expect_sent: int
    ) -> list[SentMessage]:
        return await self._call(calls.ImportMessages(name, messages, expect_sent))

    async def list_nodes(self) -> list[dict[str, Any]]:
        return await self._call(calls.ListNodes())

    async def join_node(
        self, node: int, address: str, http: str, data_dirs: tuple[str, ...], zone: str
    ) -> dict[int, str]:
        return await self._call(calls.JoinNode(node, address, http, data_dirs, zone))

    async def drain_node(self, node: int) -> None:
        await self._call(calls.DrainNode(node))

    async def activate_node(self, node: int) -> None:
        await self._call(calls.ActivateNode(node))

    async def remove_node(self, node: int) -> None:
        await self._call(calls.RemoveNode(node))

    async def set_groups(self, groups: int) -> tuple[int, ...]:
        return await self._call(calls.SetGroups(groups))

    async def list_features(self) -> list[dict[str, Any]]:
        return await self._call(calls.ListFeatures())

    async def enable_features(self, names: list[str] | None) -> list[str]:
        return await self._call(calls.EnableFeatures(names))


class NodeMetricsCollector(Collector):
    """A Prometheus collector yielding ``proxy``'s copy of the node's metrics, so a front
    end's ``/metrics`` shows the node's (Raft, WAL, queues, process) beside its own HTTP ones."""

    def __init__(self, proxy: ServiceProxy) -> None:
        self.proxy = proxy

    def collect(self) -> Iterator[Metric]:
        self.proxy.metrics_scraped = time.monotonic()
        yield from text_string_to_metric_families(self.proxy.node_metrics.decode())
