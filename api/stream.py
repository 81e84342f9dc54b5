"""The streaming protocol's server side: ``GET /v1/stream`` upgraded to a WebSocket, serving the
frames of `cmq.stream` on the same `QueueService` as the HTTP routes (same commits, leases,
receipts and errors; only the framing differs).

Per connection:

* one reader loop decodes each WebSocket message into frames and starts one task per request;
  at most `MAX_IN_FLIGHT` requests run at once, and the reader stops reading while that many
  run, so a client that outruns the cluster is slowed by TCP, not buffered here;
* one writer task sends answers, coalescing those ready into one WebSocket message (up to
  `cmq.stream.MAX_FRAMES`); its queue is bounded;
* each subscription runs `RECEIVERS` receive loops that lease at most the credit the client
  granted: a loop reserves up to ``max_batch`` of the credit, long-polls, and gives back what it
  did not receive.

When the connection ends, every task of it is cancelled and awaited (none outlives it). A send
in flight then has an unknown outcome for the client (it may commit), and messages a cancelled
receive had leased come back after their visibility timeout, exactly as with a dropped HTTP
request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from aiohttp import WSCloseCode, WSMsgType, web

from api.errors import INTERNAL_MESSAGE, http_status, is_server_fault
from cmq.consumers import Subscriptions
from cmq.errors import CmqError, InvalidParameter
from cmq.model import MAX_WAIT_SECONDS
from cmq.service import QueueService
from cmq.stream import (
    MAX_CREDIT,
    MAX_FRAMES,
    STREAM_PATH,
    Ack,
    Answer,
    BadFrame,
    Credit,
    Delivered,
    Failed,
    Nack,
    Request,
    Send,
    Subscribe,
    Unsubscribe,
    decode_requests,
    deliver,
    encode,
    results,
    sent,
)

log = logging.getLogger(__name__)

MAX_IN_FLIGHT: Final = 1024
"""Requests of one connection running at once (sends, acks, nacks)."""
MAX_SUBSCRIPTIONS: Final = 64
"""Subscriptions open on one connection."""
RECEIVERS: Final = 4
"""Receive loops per subscription (each holds at most ``max_batch`` of its credit)."""
_KINDS: Final[dict[type, str]] = {Send: "send", Subscribe: "subscribe", Ack: "ack", Nack: "nack"}
_OUT_QUEUE: Final = 4096
_RETRY_FIRST: Final = 0.05
_RETRY_MAX: Final = 1.0


Authorize = Callable[[str, str], bool]
"""Whether the connection's key may do a frame's kind (``send``, ``subscribe``, ``ack``,
``nack``) on a queue; checked on every frame (a revoked grant takes effect at once)."""

LeaderOf = Callable[[str], str]
"""Queue name -> the HTTP address of its leader when that is another node, else "" (the
`api.routing.LeaderHint` of the HTTP API; it must be as cheap)."""


def _no_hint(_queue: str) -> str:
    return ""


def _failed(fid: int, e: CmqError) -> Failed:
    if is_server_fault(e):
        log.error("stream request %d failed: %s", fid, e, extra={"event": "request_failed"})
        return Failed(fid, http_status(e), e.code, INTERNAL_MESSAGE)
    return Failed(fid, http_status(e), e.code, e.message, e.retry_after)


@dataclass(slots=True)
class _Subscription:
    frame: Subscribe
    credit: int
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reserve(self) -> int:
        """Take up to ``max_batch`` of the credit (0 when there is none)."""
        n = min(self.credit, self.frame.max_batch)
        self.credit -= n
        if self.credit == 0:
            self.changed.clear()
        return n

    def give_back(self, n: int) -> None:
        if n > 0:
            self.credit += n
            self.changed.set()


class _Connection:
    """One stream connection's state; `run` returns when the socket closes, with every task it
    started ended."""

    def __init__(
        self,
        service: QueueService,
        ws: web.WebSocketResponse,
        authorize: Authorize | None,
        subscriptions: Subscriptions,
        leader_of: LeaderOf = _no_hint,
    ) -> None:
        self.service = service
        self.leader_of = leader_of
        self.ws = ws
        self.authorize = authorize
        self.subscriptions = subscriptions
        self.out: asyncio.Queue[Answer] = asyncio.Queue(_OUT_QUEUE)
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.subs: dict[int, _Subscription] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, coro: object) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def run(self) -> None:
        writer = self._spawn(self._write_loop())
        try:
            async for msg in self.ws:
                if msg.type == WSMsgType.BINARY:
                    if not await self._dispatch(msg.data):
                        break
                elif msg.type == WSMsgType.TEXT:
                    await self.ws.close(
                        code=WSCloseCode.UNSUPPORTED_DATA, message=b"binary frames only"
                    )
                    break
                else:  # CLOSE, CLOSING, ERROR
                    break
        finally:
            writer.cancel()
            for sub in list(self.subs.values()):
                self._end(sub)
            for task in list(self.tasks):
                task.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _dispatch(self, data: bytes) -> bool:
        """Serve one WebSocket message; False when the connection was closed for it."""
        try:
            frames = decode_requests(data)
        except BadFrame as e:
            await self.ws.close(code=WSCloseCode.INVALID_TEXT, message=e.message.encode()[:120])
            return False
        for frame in frames:
            if isinstance(frame, BadFrame):
                if frame.id is None:
                    await self.ws.close(
                        code=WSCloseCode.INVALID_TEXT, message=frame.message.encode()[:120]
                    )
                    return False
                await self.out.put(_failed(frame.id, frame))
            elif (denied := self._denied(frame)) is not None:
                await self.out.put(denied)
            elif isinstance(frame, Subscribe | Credit | Unsubscribe):
                await self._subscription_frame(frame)
            else:
                await self.slots.acquire()
                self._spawn(self._serve(frame))
        return True

    def _denied(self, frame: Request) -> Failed | None:
        """The refusal of a frame the connection's key is not granted (None: allowed)."""
        if self.authorize is None or isinstance(frame, Credit | Unsubscribe):
            return None
        kind = _KINDS[type(frame)]
        if self.authorize(kind, frame.queue):
            return None
        message = f"the stream's access key is not granted {kind} on queue {frame.queue}"
        return Failed(frame.id, 403, "AccessDenied", message)

    async def _serve(self, frame: Send | Ack | Nack) -> None:
        try:
            answer: Answer
            try:
                if isinstance(frame, Send):
                    done = await self.service.send(
                        frame.queue, [m.to_model() for m in frame.messages]
                    )
                    ids = [(m.id, m.seq) for m in done]
                    answer = sent(frame.id, ids, self.leader_of(frame.queue))
                else:
                    if isinstance(frame, Ack):
                        got = await self.service.ack(frame.queue, frame.receipts)
                    else:
                        got = await self.service.nack(
                            frame.queue, frame.receipts, frame.delay_seconds
                        )
                    entries = [(r.receipt, r.ok, r.error) for r in got]
                    answer = results(frame.id, entries, self.leader_of(frame.queue))
            except CmqError as e:
                answer = _failed(frame.id, e)
            except Exception:
                log.exception(
                    "stream request %d failed", frame.id, extra={"event": "request_failed"}
                )
                answer = Failed(frame.id, 500, "InternalError", INTERNAL_MESSAGE)
            await self.out.put(answer)
        finally:
            self.slots.release()

    async def _subscription_frame(self, frame: Subscribe | Credit | Unsubscribe) -> None:
        sub = self.subs.get(frame.id)
        if isinstance(frame, Subscribe):
            if sub is not None:
                await self.out.put(
                    _failed(frame.id, InvalidParameter(f"subscription {frame.id} is open"))
                )
                return
            if len(self.subs) >= MAX_SUBSCRIPTIONS:
                error = InvalidParameter(f"at most {MAX_SUBSCRIPTIONS} subscriptions")
                await self.out.put(_failed(frame.id, error))
                return
            sub = _Subscription(frame, frame.credit)
            if frame.credit:
                sub.changed.set()
            self.subs[frame.id] = sub
            self.subscriptions.opened(frame.queue)
            sub.tasks = [self._spawn(self._receive_loop(sub)) for _ in range(RECEIVERS)]
        elif sub is None:
            # Late frames for a subscription that ended are harmless: ignored.
            return
        elif isinstance(frame, Credit):
            if sub.credit + frame.credit > MAX_CREDIT:
                await self.out.put(
                    _failed(frame.id, InvalidParameter(f"credit above {MAX_CREDIT}"))
                )
                return
            sub.give_back(frame.credit)
        else:
            self._end(sub)

    def _end(self, sub: _Subscription) -> None:
        if self.subs.pop(sub.frame.id, None) is not None:
            self.subscriptions.closed(sub.frame.queue)
        current = asyncio.current_task()
        for task in sub.tasks:
            if task is not current:
                task.cancel()

    async def _receive_loop(self, sub: _Subscription) -> None:
        f = sub.frame
        backoff = _RETRY_FIRST
        while True:
            await sub.changed.wait()
            n = sub.reserve()
            if n == 0:
                continue
            try:
                got = await self.service.receive(f.queue, n, f.visibility_timeout, MAX_WAIT_SECONDS)
            except CmqError as e:
                sub.give_back(n)
                if e.retriable:
                    await asyncio.sleep(e.retry_after or backoff)
                    backoff = min(backoff * 2, _RETRY_MAX)
                    continue
                if f.id in self.subs:
                    self._end(sub)
                    await self.out.put(_failed(f.id, e))
                return
            backoff = _RETRY_FIRST
            sub.give_back(n - len(got))
            if got:
                leader = self.leader_of(f.queue)
                await self.out.put(deliver(f.id, [Delivered.of(m) for m in got], leader))

    async def _write_loop(self) -> None:
        while True:
            frames = [await self.out.get()]
            while len(frames) < MAX_FRAMES and not self.out.empty():
                frames.append(self.out.get_nowait())
            try:
                await self.ws.send_bytes(encode(frames))
            except ConnectionError:
                return


async def stream_handler(
    request: web.Request,
    service: QueueService,
    max_message_bytes: int,
    authorize: Authorize | None = None,
    subscriptions: Subscriptions | None = None,
    *,
    leader_of: LeaderOf | None = None,
) -> web.WebSocketResponse:
    """Upgrade ``request`` and serve the stream until it closes; WebSocket messages above
    ``max_message_bytes`` close the connection (status 1009). ``authorize``: the per-frame
    check (None: anonymous access, every frame allowed); a refused frame gets `Failed` 403
    ``AccessDenied`` and changes nothing. ``subscriptions``: told of each subscription
    opened and ended (the node's metrics read it; None: counted nowhere). ``leader_of``: the
    leader hint `Sent`, `Results` and `Deliver` frames carry when it names another node (None:
    no hints; `cmq.stream`, "Leader hint")."""
    ws = web.WebSocketResponse(max_msg_size=max_message_bytes, heartbeat=30.0, compress=False)
    await ws.prepare(request)
    counts = Subscriptions() if subscriptions is None else subscriptions
    hint = _no_hint if leader_of is None else leader_of
    await _Connection(service, ws, authorize, counts, hint).run()
    if not ws.closed:
        await ws.close()
    return ws


__all__ = ["MAX_IN_FLIGHT", "RECEIVERS", "STREAM_PATH", "Request", "stream_handler"]
