"""`StreamClient`: the Python client of the streaming protocol (`cmq.stream`, one WebSocket per
client on ``/v1/stream``), for producers and consumers that want the brokers' model: many
unconfirmed sends on one connection (publisher confirms), messages pushed within a credit the
consumer grants (prefetch), acks sent as frames.

    async with StreamClient("http://127.0.0.1:8080,http://127.0.0.1:8081") as s:
        sent = await s.send("orders", ["order 1", "order 2"])   # committed on a majority
        sub = await s.subscribe("orders", prefetch=256)
        async for batch in sub:
            ...
            await sub.ack(batch)            # acknowledges, and grants the credit back

Guarantees are the HTTP API's: a `send` returns after the messages are committed; a delivered
message is leased and comes back after its visibility timeout unless acknowledged. Every call
may raise the `cmq.errors` class of the server's error code (also a `ServerError` with the HTTP
status the same failure gets over HTTP), `ConnectFailed` when no node accepted the connection,
or `ResponseLost` when the connection dropped or ``timeout`` passed with the request sent:
then a send's outcome is unknown, and it is never resent here.

At most ``window`` requests are unanswered at once (further calls wait). A dropped connection
fails the requests in flight; the next call connects again, to the next node URL, and every
open subscription is resumed there with the credit it had left.

Leader-direct (``leader_direct``, on by default): a node answering about a queue it does not
lead names the leader's HTTP address in the answer (`cmq.stream`, "Leader hint"); the client
then keeps a connection to that node too (at most `MAX_CONNECTIONS` besides the first) and sends
the queue's sends, acks and nacks over it, and moves the queue's subscriptions there (an
`Unsubscribe` on the old connection, a `Subscribe` with the credit left on the new one). Which
hints are followed is `cmq.client.leaders.Leaders`'s rule, as for the HTTP client: only one
naming one of the client's URLs unless ``leader_any_node``. When a connection to a leader cannot
be opened or drops, its queues fall back to the first connection (their subscriptions resume
there); a send in flight on it has an unknown outcome and is not resent, as above. A moved
subscription may briefly hold up to twice its prefetch (deliveries the old node had leased when
the `Unsubscribe` reached it still arrive), and a message a node had leased for it and not yet
pushed when it ended comes back after its visibility timeout.

This module holds the connections, leader routing and the request window; a subscription's
credit and acks are `cmq.client.stream_subscription.Subscription` (exported here too).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Final, cast

import aiohttp

from cmq.client import tracing
from cmq.client.errors import ConnectFailed, ResponseLost, server_error
from cmq.client.http import parse_urls
from cmq.client.leaders import Leaders
from cmq.client.signing import AccessKey, ssl_context
from cmq.client.stream_subscription import DEFAULT_PREFETCH, Subscription, delivered
from cmq.client.types import Message, Outgoing
from cmq.errors import CmqError
from cmq.model import EntryResult, SentMessage
from cmq.stream import (
    STREAM_PATH,
    Ack,
    Answer,
    Credit,
    Deliver,
    Failed,
    Nack,
    PlainMessage,
    Request,
    Results,
    Send,
    Sent,
    Unsubscribe,
    decode_answers,
    encode,
)
from cmq.stream import Message as WireMessage

__all__ = ["DEFAULT_PREFETCH", "MAX_CONNECTIONS", "StreamClient", "Subscription"]

log = logging.getLogger(__name__)

_MAX_BATCH_FRAMES: Final = 512
_MAX_MESSAGE_BYTES: Final = 64 << 20
_RESUME_FIRST: Final = 0.05
_RESUME_MAX: Final = 2.0
MAX_CONNECTIONS: Final = 8
"""Connections to leaders a client keeps besides its first one (further queues use the first)."""


def _wire(m: Outgoing, trace: dict[str, str]) -> WireMessage:
    """``m`` as a frame carries it, with the trace context attributes ``trace``
    (`cmq.client.tracing.current`) added as `cmq.client.tracing.with_trace` says."""
    if not isinstance(m, Message):
        m = Message(m)
    traced = tracing.with_trace(m.attributes, trace)
    attrs = dict(traced) if traced else None
    body, binary = (m.body, True) if isinstance(m.body, bytes) else (m.body.encode(), False)
    if m.deliver_at is None and m.ttl_seconds is None and not m.priority:
        # msgspec frames by the runtime type: the six fields every server release reads.
        plain = PlainMessage(body, binary, m.delay_seconds, attrs, m.dedup_id, m.group_id)
        return cast("WireMessage", plain)
    at = None if m.deliver_at is None else m.deliver_at.isoformat()
    return WireMessage(
        body, binary, m.delay_seconds, attrs, m.dedup_id, m.group_id, at, m.ttl_seconds, m.priority
    )


class _Connection:
    """One WebSocket and its reader and writer tasks; `closed` is set when it ends."""

    def __init__(self, client: StreamClient, ws: aiohttp.ClientWebSocketResponse, url: str):
        self.client = client
        self.ws = ws
        self.url = url
        self.out: asyncio.Queue[Request] = asyncio.Queue(_MAX_BATCH_FRAMES * 4)
        self.pending: dict[int, asyncio.Future[Answer]] = {}
        self.closed = asyncio.Event()
        self.tasks = [
            asyncio.get_running_loop().create_task(self._read()),
            asyncio.get_running_loop().create_task(self._write()),
        ]

    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.BINARY:
                    break
                for answer in decode_answers(msg.data):
                    self._dispatch(answer)
        except CmqError as e:  # an answer this client cannot read (a newer server's frame)
            log.warning("stream to %s dropped: %s", self.url, e)
            self._lost(f"closed: {e}")
        except (aiohttp.ClientError, ConnectionError):
            pass
        finally:
            self._lost()
            # The writer waits on `out` for good once the socket is gone: end it with the
            # reader, so a lost connection leaves no task behind (close() is never called on it).
            self.tasks[1].cancel()

    def _dispatch(self, answer: Answer) -> None:
        if isinstance(answer, Deliver):
            sub = self.client._subs.get(answer.id)
            if sub is not None:
                sub._deliver(delivered(answer))
                if answer.leader is not None:
                    self.client._learn(sub.queue, self.url, answer.leader)
            return
        fut = self.pending.pop(answer.id, None)
        if fut is not None:
            if not fut.done():
                fut.set_result(answer)
        elif isinstance(answer, Failed):
            sub = self.client._subs.get(answer.id)
            if sub is not None:
                sub._fail(server_error(answer.status, answer.code, answer.message))

    async def _write(self) -> None:
        try:
            while True:
                frames = [await self.out.get()]
                while len(frames) < _MAX_BATCH_FRAMES and not self.out.empty():
                    frames.append(self.out.get_nowait())
                await self.ws.send_bytes(encode(frames))
        except (aiohttp.ClientError, ConnectionError, RuntimeError):
            await self.ws.close()

    def _lost(self, why: str = "closed") -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.client._lost(self)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(
                    ResponseLost(f"stream to {self.url} {why}", self.url, "ConnectionClosed")
                )
        self.pending.clear()

    async def close(self) -> None:
        await self.ws.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self._lost()


class StreamClient:
    """See the module docstring. Not thread-safe; use it from one event loop."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        timeout: float = 30.0,
        window: int = 1024,
        session: aiohttp.ClientSession | None = None,
        access_key: AccessKey | tuple[str, str] | None = None,
        ca_file: str | None = None,
        leader_direct: bool = True,
        leader_any_node: bool = False,
    ) -> None:
        """``access_key``: the key the connection is signed with (None: the environment's or
        a key file's, `cmq.client.signing`, else unsigned); ``ca_file``: the CAs an https URL
        is verified with. ``leader_direct``: send each queue's frames over a connection to its
        leader (see the module docstring); ``leader_any_node``: also follow a hint naming an
        address outside ``urls`` (off: a node could steer the client and its key elsewhere)."""
        self.urls = parse_urls(urls)
        self.access_key = AccessKey.resolve(access_key)
        self._ssl = ssl_context(ca_file)
        self.timeout = timeout
        self._window = asyncio.Semaphore(window)
        self._session = session
        self._owned = session is None
        self._conn: _Connection | None = None
        self._lock = asyncio.Lock()
        self._next_url = 0
        self._ids = itertools.count(1)
        self._subs: dict[int, Subscription] = {}
        self._closing = False
        self._resumer: asyncio.Task[None] | None = None
        self._leaders = Leaders(self.urls, any_node=leader_any_node) if leader_direct else None
        self._direct: dict[str, _Connection] = {}
        """Connections to leaders, by base URL (at most `MAX_CONNECTIONS`)."""
        self._moves: set[int] = set()
        """Subscriptions (ids) to move to their queue's leader."""
        self._mover: asyncio.Task[None] | None = None

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection (requests in flight fail with `ResponseLost`)."""
        self._closing = True
        for task in (self._resumer, self._mover):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for sub in list(self._subs.values()):
            sub._closed = True
        self._subs.clear()
        for conn in list(self._direct.values()):
            await conn.close()
        self._direct.clear()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        if self._owned and self._session is not None:
            await self._session.close()
            self._session = None

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed.is_set():
            return conn
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed.is_set():
                return conn
            if conn is not None:
                await conn.close()
            last: Exception | None = None
            for i in range(len(self.urls)):
                url = self.urls[(self._next_url + i) % len(self.urls)]
                try:
                    conn = await self._open(url)
                except (aiohttp.ClientError, OSError, TimeoutError) as e:
                    last = e
                    continue
                self._next_url = (self._next_url + i + 1) % len(self.urls)
                self._conn = conn
                await self._place_orphans(conn)
                return conn
            raise ConnectFailed(
                f"no node accepted a stream connection: {last}", self.urls[0], type(last).__name__
            )

    async def _open(self, url: str) -> _Connection:
        """A new connection to ``url``; raises the aiohttp error when it cannot be opened, or
        the `cmq.errors` class of a 401/403 refusal."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = (
            {} if self.access_key is None else self.access_key.sign("GET", url + STREAM_PATH, None)
        )
        try:
            ws = await self._session.ws_connect(
                url + STREAM_PATH,
                headers=headers,
                ssl=self._ssl or True,
                timeout=aiohttp.ClientWSTimeout(ws_close=5.0),
                max_msg_size=_MAX_MESSAGE_BYTES,
                heartbeat=30.0,
                autoping=True,
            )
        except aiohttp.WSServerHandshakeError as e:
            if e.status in {401, 403}:  # refused, not unreachable: say so
                code = "AccessDenied" if e.status == 403 else "Unauthorized"
                raise server_error(e.status, code, e.message) from None
            raise
        return _Connection(self, ws, url)

    async def _connection_for(self, queue: str) -> _Connection:
        """The connection ``queue``'s frames go over: its leader's when one is known and can
        be reached (leader-direct), else the first connection (`_connection`)."""
        url = None if self._leaders is None else self._leaders.get(queue)
        if url is None:
            return await self._connection()
        default = self._conn
        if default is not None and not default.closed.is_set() and default.url == url:
            return default
        conn = self._direct.get(url)
        if conn is not None and not conn.closed.is_set():
            return conn
        async with self._lock:
            conn = self._direct.get(url)
            if (conn is None or conn.closed.is_set()) and (
                url in self._direct or len(self._direct) < MAX_CONNECTIONS
            ):
                try:
                    conn = await self._open(url)
                except (aiohttp.ClientError, OSError, TimeoutError, CmqError) as e:
                    log.info("stream to leader %s failed: %s", url, e)
                    conn = None
                    if self._leaders is not None:
                        self._leaders.lost(url)
                else:
                    self._direct[url] = conn
        if conn is None or conn.closed.is_set():
            return await self._connection()
        return conn

    async def _place_orphans(self, conn: _Connection) -> None:
        """Resume on ``conn`` every subscription whose connection ended."""
        for sub in list(self._subs.values()):
            if sub.conn is None or sub.conn.closed.is_set():
                sub.conn = conn
                await conn.out.put(sub._frame())

    async def _call(
        self, frame: Send | Ack | Nack, then: Callable[[], Credit | None] | None = None
    ) -> Answer:
        """Send ``frame`` and wait for its answer. ``then``: called once ``frame`` is queued on
        the connection; the frame it returns (if any) is queued right behind it, with no
        suspension between while the queue has room, so both leave in the same WebSocket
        message (else in order, in the next)."""
        async with self._window:
            conn = await self._connection_for(frame.queue)
            fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            conn.pending[frame.id] = fut
            await conn.out.put(frame)
            if then is not None and (follow := then()) is not None:
                sub = self._subs.get(follow.id)
                target = conn if sub is None or sub.conn is None else sub.conn
                if not target.closed.is_set():  # else resumed with the credit left
                    await target.out.put(follow)  # no suspension while the queue has room
            try:
                async with asyncio.timeout(self.timeout):
                    answer = await fut
            except TimeoutError:
                conn.pending.pop(frame.id, None)
                if self._leaders is not None:
                    self._leaders.failed(frame.queue, conn.url)
                raise ResponseLost(
                    f"no answer from {conn.url} within {self.timeout} s", conn.url, "timeout"
                ) from None
        if isinstance(answer, Failed):
            raise server_error(answer.status, answer.code, answer.message, answer.retry_after)
        if not isinstance(answer, Deliver) and answer.leader is not None:
            self._learn(frame.queue, conn.url, answer.leader)
        return answer

    async def send(self, queue: str, messages: Sequence[Outgoing]) -> list[SentMessage]:
        """Append ``messages`` (1..100) in order; returns once they are committed."""
        trace = tracing.current()
        frame = Send(next(self._ids), queue, [_wire(m, trace) for m in messages])
        answer = await self._call(frame)
        assert isinstance(answer, Sent), answer
        return [SentMessage(mid, seq) for mid, seq in answer.messages]

    async def ack(self, queue: str, receipts: Sequence[str]) -> list[EntryResult]:
        """Delete the messages whose receipts hold current leases; per-receipt results."""
        answer = await self._call(Ack(next(self._ids), queue, list(receipts)))
        assert isinstance(answer, Results), answer
        return [EntryResult(r, ok, err) for r, ok, err in answer.results]

    async def nack(
        self, queue: str, receipts: Sequence[str], delay_seconds: int = 0
    ) -> list[EntryResult]:
        """Release leases: the messages become visible again after ``delay_seconds``."""
        answer = await self._call(Nack(next(self._ids), queue, list(receipts), delay_seconds))
        assert isinstance(answer, Results), answer
        return [EntryResult(r, ok, err) for r, ok, err in answer.results]

    async def subscribe(
        self,
        queue: str,
        *,
        prefetch: int = DEFAULT_PREFETCH,
        visibility_timeout: int | None = None,
        max_batch: int = 32,
    ) -> Subscription:
        """Start deliveries of ``queue``'s messages, at most ``prefetch`` unacknowledged at once
        (see `Subscription`; `DEFAULT_PREFETCH` says how the default was chosen).
        ``visibility_timeout`` None: the queue's."""
        sub = Subscription(
            self,
            next(self._ids),
            queue,
            prefetch=prefetch,
            visibility_timeout=visibility_timeout,
            max_batch=max_batch,
        )
        conn = await self._connection_for(queue)
        sub.conn = conn
        self._subs[sub.id] = sub
        await conn.out.put(sub._frame())
        return sub

    def _lost(self, conn: _Connection) -> None:
        """``conn`` ended: its queues stop preferring its node, and its subscriptions are
        resumed on another connection (in the background: a consumer may only be waiting for
        deliveries)."""
        if self._direct.get(conn.url) is conn:
            del self._direct[conn.url]
        if self._leaders is not None:
            self._leaders.lost(conn.url)
        if self._subs and not self._closing and (self._resumer is None or self._resumer.done()):
            self._resumer = asyncio.get_running_loop().create_task(self._resume())

    async def _resume(self) -> None:
        delay = _RESUME_FIRST
        while self._subs and not self._closing:
            try:
                for sub in list(self._subs.values()):
                    if sub.conn is None or sub.conn.closed.is_set():
                        conn = await self._connection_for(sub.queue)
                        if sub.conn is None or sub.conn.closed.is_set():
                            sub.conn = conn
                            await conn.out.put(sub._frame())
                return
            except ConnectFailed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RESUME_MAX)

    def _learn(self, queue: str, url: str, hint: str) -> None:
        """A frame about ``queue`` answered over the connection to ``url`` named its leader
        ``hint``: prefer it (`Leaders.learn`) and move the queue's subscriptions there."""
        if self._leaders is None:
            return
        self._leaders.learn(queue, url, hint)
        target = self._leaders.get(queue)
        if target is None:
            return
        for sub in self._subs.values():
            if sub.queue == queue and sub.conn is not None and sub.conn.url != target:
                self._moves.add(sub.id)
        if self._moves and not self._closing and (self._mover is None or self._mover.done()):
            self._mover = asyncio.get_running_loop().create_task(self._move())

    async def _move(self) -> None:
        """Move each subscription in `_moves` to its queue's current connection."""
        while self._moves and not self._closing:
            sub = self._subs.get(self._moves.pop())
            if sub is None or sub._closed:
                continue
            try:
                target = await self._connection_for(sub.queue)
            except CmqError:  # no node at all (or refused): resumed when one answers
                continue
            old = sub.conn
            if old is target or sub._closed:
                continue
            sub.conn = target
            if old is not None and not old.closed.is_set():
                await old.out.put(Unsubscribe(sub.id))
            await target.out.put(sub._frame())
