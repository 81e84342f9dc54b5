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
`METRICS_SECONDS` (`NodeMetricsCollector` adds it to a front end's own registry).
`read_segment` is carried whole: the node reads the segment to its end (or to its damage,
raised after the records before it) before the proxy streams it.

Wire: a frame is a big-endian u32 length and a pickle. A request is ``(rid, method, args,
kwargs)``; a cancel is ``(rid, None, (), {})``; a reply is ``(rid, True, value)`` or ``(rid,
False, (code, message, retry_after))``. pickle is safe here only because the socket file is
made readable by its owner alone (mode 0600 inside the node's data directory): only processes
of the user that runs the node can connect, and they can already read its data.

Versions: the wire is version 1 (`WIRE_VERSION`), implicit: a front end and its node process
are always the same release (one process tree, one installation), so no version is exchanged.
A frame that does not unpickle, or is not the tuple its side expects, is `UnreadableFrame`
naming its size and the reason: the connection is dropped and that is logged (the proxy's
pending calls end `OutcomeUnknown` with the reason), never a bare traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from cmq.errors import CmqError, OutcomeUnknown, Unavailable, UnreadableFrame, error_for
from cmq.model import (
    ArchiveResult,
    ClaimResult,
    EntryResult,
    ExportPage,
    GroupDigest,
    ImportedMessage,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SegmentListing,
    SegmentRecord,
    SegmentStream,
    SentMessage,
)
from cmq.service import QueueService

log = logging.getLogger("cmq.frontend.proxy")

T = TypeVar("T")
_HEAD = struct.Struct(">I")
MAX_FRAME = 256 << 20
"""A frame above this is a broken peer: the connection is closed."""
MAX_INFLIGHT = 4096
"""Calls one connection may have running in the node process at once; more wait to be read."""
STATE_SECONDS = 0.2
"""How often a proxy refreshes its copy of ``is_ready`` and ``status``."""
METRICS_SECONDS = 1.0
"""How often a proxy refreshes its copy of the node's metrics (when the node exports them)."""
_STATE = "_state"
_METRICS = "_metrics"
_READ_SEGMENT = "read_segment"
CALLS = frozenset(
    {
        "create_queue",
        "list_queues",
        "get_queue",
        "peek",
        "set_attributes",
        "delete_queue",
        "queue_metadata",
        "update_metadata",
        "purge",
        "send",
        "receive",
        "ack",
        "change_visibility",
        "nack",
        "list_segments",
        "claim_segments",
        "mark_archived",
        "group_digest",
        "list_nodes",
        "join_node",
        "drain_node",
        "activate_node",
        "remove_node",
        "set_groups",
        "list_features",
        "enable_features",
        "export_catalog",
        "import_catalog",
        "export_messages",
        "import_messages",
    }
)
"""The `QueueService` coroutine methods a proxy may call (besides its own state and
`read_segment`); any other name is refused."""


def _frame(obj: object) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEAD.pack(len(data)) + data


WIRE_VERSION = 1
"""The frame layout above; implicit (see "Versions" in the module docstring)."""


async def _read_frame(reader: asyncio.StreamReader, fields: int) -> tuple[Any, ...]:
    """The next frame: a tuple of ``fields`` items; `UnreadableFrame` if it is not one."""
    (size,) = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    if size > MAX_FRAME:
        raise ConnectionError(f"frame of {size} bytes")
    return decode_frame(await reader.readexactly(size), fields)


def decode_frame(data: bytes, fields: int) -> tuple[Any, ...]:
    """A frame's body as the tuple of ``fields`` items it must be; `UnreadableFrame` naming
    what is wrong otherwise (wire version `WIRE_VERSION`)."""
    try:
        value = pickle.loads(data)
    except Exception as e:  # pickle raises many types on bad input
        raise UnreadableFrame(
            f"front-end socket frame of {len(data)} bytes does not decode (wire version "
            f"{WIRE_VERSION}): {type(e).__name__}: {e}"
        ) from None
    if not isinstance(value, tuple) or len(value) != fields:
        raise UnreadableFrame(
            f"front-end socket frame of {len(data)} bytes is a {type(value).__name__}, not a "
            f"tuple of {fields} items (wire version {WIRE_VERSION})"
        )
    return value


def _error_reply(e: CmqError) -> tuple[str, str, float | None]:
    return (e.code, e.message, e.retry_after)


def _raise(reply: tuple[str, str, float | None]) -> CmqError:
    code, message, retry_after = reply
    err = error_for(code, message)
    err.retry_after = retry_after
    return err


class ServiceServer:
    """Serves ``service`` on the Unix socket ``path`` until `close`."""

    def __init__(
        self, service: QueueService, path: str, metrics: Callable[[], bytes] | None = None
    ) -> None:
        """``metrics``: the node's metrics in Prometheus text format (None: none exported)."""
        self.service = service
        self.path = path
        self.metrics = metrics
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
                rid, method, args, kwargs = await _read_frame(reader, 4)
                if method is None:
                    task = running.get(rid)
                    if task is not None:
                        task.cancel()
                    continue
                await room.acquire()
                task = asyncio.create_task(self._run(writer, rid, method, args, kwargs))
                running[rid] = task
                task.add_done_callback(done(rid))
        except (asyncio.IncompleteReadError, ConnectionError):
            # The front end went away: what it still waits for has no one to answer.
            log.info("a front end closed its connection; cancelling its %d calls", len(running))
        except UnreadableFrame as e:
            log.error("a front end's request could not be read, dropping its connection: %s", e)
        except Exception:  # an undecodable frame: the connection is dropped, loudly
            log.exception("a front end's request could not be read; dropping its connection")
        finally:
            for task in list(running.values()):
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
            writer.close()

    async def _run(
        self,
        writer: asyncio.StreamWriter,
        rid: int,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        try:
            if method == _STATE:
                value: Any = (self.service.is_ready(), self.service.status())
            elif method == _METRICS:
                value = b"" if self.metrics is None else self.metrics()
            elif method == _READ_SEGMENT:
                value = await self._read_segment(*args)
            elif method in CALLS:
                value = await getattr(self.service, method)(*args, **kwargs)
            else:
                raise CmqError(f"no such call: {method!r}")
            reply: object = (rid, True, value)
        except CmqError as e:
            reply = (rid, False, _error_reply(e))
        except Exception as e:  # reported to the caller, never swallowed silently
            log.exception("front-end call %s failed", method)
            reply = (rid, False, ("InternalError", f"internal error: {type(e).__name__}", None))
        if not writer.is_closing():
            writer.write(_frame(reply))

    async def _read_segment(self, name: str, first_seq: int) -> Any:
        stream = await self.service.read_segment(name, first_seq)
        batches: list[list[SegmentRecord]] = []
        damage = None
        try:
            async for batch in stream.batches:
                batches.append(batch)
        except CmqError as e:
            damage = _error_reply(e)
        return (stream.checksum, batches, damage)


class ServiceProxy(QueueService):
    """The `QueueService` of the node serving ``path``; `connect` before use, `close` after."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._state_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next = 0
        self._ready = False
        self._status: dict[str, Any] = {}
        self._lost: str | None = None
        self.node_metrics = b""
        """The node's metrics text as last fetched (empty until then, or when it has none)."""

    async def connect(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(self.path)
        self._reader_task = asyncio.create_task(self._read(reader))
        self._ready, self._status = await self._call(_STATE)
        self._state_task = asyncio.create_task(self._refresh())

    async def close(self) -> None:
        for task in (self._state_task, self._reader_task):
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
                rid, ok, value = await _read_frame(reader, 3)
                fut = self._pending.pop(rid, None)
                if fut is not None and not fut.done():
                    if ok:
                        fut.set_result(value)
                    else:
                        fut.set_exception(_raise(value))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            self._fail(f"the node process went away ({type(e).__name__})")
        except UnreadableFrame as e:
            log.error("front-end connection to the node dropped: %s", e)
            self._fail(f"the node's answer could not be read: {e}")
        except Exception as e:  # an undecodable frame: nothing after it can be trusted
            log.exception("front-end connection to the node failed")
            self._fail(f"the node's answer could not be read ({type(e).__name__})")

    def _fail(self, why: str) -> None:
        self._lost = self._lost or why
        self._ready = False
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(OutcomeUnknown(why))

    async def _refresh(self) -> None:
        every = max(1, round(METRICS_SECONDS / STATE_SECONDS))
        for turn in itertools.count():
            if self._lost is not None:
                return
            with contextlib.suppress(CmqError):
                if turn % every == 0:
                    self.node_metrics = bytes(await self._call(_METRICS))
                await asyncio.sleep(STATE_SECONDS)
                self._ready, self._status = await self._call(_STATE)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._lost is not None or self._writer is None:
            raise Unavailable(self._lost or "the front end is not connected")
        self._next += 1
        rid = self._next
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self._writer.write(_frame((rid, method, args, kwargs)))
        try:
            return await fut
        except asyncio.CancelledError:
            if self._pending.pop(rid, None) is not None and not self._writer.is_closing():
                self._writer.write(_frame((rid, None, (), {})))
            raise

    # -- QueueService ------------------------------------------------------------------------------
    def is_ready(self) -> bool:
        return self._ready and self._lost is None

    def status(self) -> dict[str, Any]:
        return self._status

    async def create_queue(self, name: str, attributes: QueueAttributes) -> bool:
        return bool(await self._call("create_queue", name, attributes))

    async def list_queues(self) -> list[str]:
        return list(await self._call("list_queues"))

    async def get_queue(self, name: str) -> tuple[QueueAttributes, QueueStats]:
        attributes, stats = await self._call("get_queue", name)
        return attributes, stats

    async def peek(self, name: str, limit: int) -> list[PeekedMessage]:
        return list(await self._call("peek", name, limit))

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        return _typed(QueueAttributes, await self._call("set_attributes", name, changes))

    async def delete_queue(self, name: str) -> None:
        await self._call("delete_queue", name)

    async def queue_metadata(self, name: str) -> dict[str, str]:
        return dict(await self._call("queue_metadata", name))

    async def update_metadata(
        self, name: str, changes: dict[str, str], unset: list[str]
    ) -> dict[str, str]:
        return dict(await self._call("update_metadata", name, changes, unset))

    async def purge(self, name: str) -> int:
        return int(await self._call("purge", name))

    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]:
        return list(await self._call("send", name, messages))

    async def export_catalog(self) -> dict[str, Any]:
        return dict(await self._call("export_catalog"))

    async def import_catalog(
        self, keys: list[Any], metadata: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        return dict(await self._call("import_catalog", keys, metadata))

    async def export_messages(self, name: str, after: int, upto: int, limit: int) -> ExportPage:
        return _typed(ExportPage, await self._call("export_messages", name, after, upto, limit))

    async def import_messages(
        self, name: str, messages: list[ImportedMessage], expect_sent: int
    ) -> list[SentMessage]:
        return list(await self._call("import_messages", name, messages, expect_sent))

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait_seconds: int | None,
        *,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        got = await self._call(
            "receive", name, max_messages, visibility_timeout, wait_seconds, attempt_id=attempt_id
        )
        return list(got)

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        return list(await self._call("ack", name, receipts))

    async def change_visibility(
        self, name: str, entries: list[tuple[str, int]]
    ) -> list[EntryResult]:
        return list(await self._call("change_visibility", name, entries))

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        return list(await self._call("nack", name, receipts, delay_seconds))

    async def list_segments(self, name: str, state: str = "all") -> SegmentListing:
        return _typed(SegmentListing, await self._call("list_segments", name, state))

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        checksum, batches, damage = await self._call(_READ_SEGMENT, name, first_seq)

        async def replay() -> AsyncIterator[list[SegmentRecord]]:
            for batch in batches:
                yield batch
            if damage is not None:
                raise _raise(damage)

        return SegmentStream(checksum, replay())

    async def claim_segments(
        self, name: str, batch_id: str, segments: list[int], ttl_ms: int
    ) -> ClaimResult:
        result = await self._call("claim_segments", name, batch_id, segments, ttl_ms)
        return _typed(ClaimResult, result)

    async def mark_archived(self, name: str, batch_id: str, segments: list[int]) -> ArchiveResult:
        return _typed(ArchiveResult, await self._call("mark_archived", name, batch_id, segments))

    async def group_digest(self, group: int) -> GroupDigest:
        return _typed(GroupDigest, await self._call("group_digest", group))

    async def list_nodes(self) -> list[dict[str, Any]]:
        return list(await self._call("list_nodes"))

    async def join_node(
        self, node: int, address: str, http: str, data_dirs: tuple[str, ...], zone: str
    ) -> dict[int, str]:
        return dict(await self._call("join_node", node, address, http, data_dirs, zone))

    async def drain_node(self, node: int) -> None:
        await self._call("drain_node", node)

    async def activate_node(self, node: int) -> None:
        await self._call("activate_node", node)

    async def remove_node(self, node: int) -> None:
        await self._call("remove_node", node)

    async def set_groups(self, groups: int) -> tuple[int, ...]:
        return tuple(await self._call("set_groups", groups))

    async def list_features(self) -> list[dict[str, Any]]:
        return list(await self._call("list_features"))

    async def enable_features(self, names: list[str] | None) -> list[str]:
        return list(await self._call("enable_features", names))


class NodeMetricsCollector(Collector):
    """A Prometheus collector yielding ``proxy``'s copy of the node's metrics, so a front
    end's ``/metrics`` shows the node's (Raft, WAL, queues, process) beside its own HTTP ones."""

    def __init__(self, proxy: ServiceProxy) -> None:
        self.proxy = proxy

    def collect(self) -> Iterator[Metric]:
        yield from text_string_to_metric_families(self.proxy.node_metrics.decode())


def _typed(kind: type[T], value: object) -> T:
    if not isinstance(value, kind):
        raise CmqError(f"the node answered {type(value).__name__}, not {kind.__name__}")
    return value
