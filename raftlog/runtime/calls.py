"""`Calls`: requests forwarded to a peer over the peer connection, and their replies.

A node calls a peer (`Calls.call`: a ``CALL`` frame with a call id, the reply a ``REPLY`` frame
with the same id) to run something where it must run, e.g. a client request on the node that
leads its group. Each side bounds what is in flight (`max_concurrent`): a caller over the bound
gets `Overloaded`, a peer over it answers with an error reply. Every call ends: with the reply,
the peer's error (`RemoteCallError`), `PeerUnavailable` (unreachable, no reply in time, or the
caller's ``abandon`` check gave up: the outcome is then unknown), or `PeerUnavailable` when the
node shuts down. Served calls are tasks owned here and cancelled by `close`.

Clock probes (`raftlog.runtime.peerwatch`) ride on the same frames, their call ids flagged
with `PROBE_CALL_BIT`: a probe is answered at once with this node's clock, and a probe's reply
goes to the `PeerWatch`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from raftlog.errors import Overloaded, PeerUnavailable
from raftlog.runtime.config import RemoteCallError
from raftlog.runtime.host import PeerTransport
from raftlog.runtime.peerwatch import CallWatchdog, PeerWatch
from raftlog.transport.codec import (
    PROBE_CALL_BIT,
    FrameKind,
    decode_call,
    encode_call,
    is_clock_probe,
)

log = logging.getLogger("raftlog.runtime")

CallHandler = Callable[[int, bytes], Awaitable[bytes]]
"""Serves a call forwarded by a peer: (peer id, request payload) → reply payload. Raising
`RemoteCallError` sends its message back as an error reply."""


def _expire_call(fut: asyncio.Future[bytes], why: str) -> None:
    if not fut.done():
        fut.set_exception(PeerUnavailable(why))


class Calls:
    """This node's forwarded calls, both ways (see the module docstring)."""

    __slots__ = ("_calls", "_ids", "_serving", "_transport", "_watch", "handler", "max_concurrent")

    def __init__(self, transport: PeerTransport, watch: PeerWatch, max_concurrent: int = 4096):
        self._transport = transport
        self._watch = watch
        self.handler: CallHandler | None = None
        """Serves the calls peers forward here (None: they get an error reply)."""
        self.max_concurrent = max_concurrent
        """Calls in flight from here, and calls served here at once, at most."""
        self._calls: dict[int, asyncio.Future[bytes]] = {}
        self._ids = 0
        self._serving: dict[asyncio.Task[None], None] = {}  # ordered, so runs replay exactly

    async def call(
        self,
        peer: int,
        payload: bytes,
        timeout: float,
        *,
        abandon: Callable[[], str | None] | None = None,
        check_every: float = 0.2,
    ) -> bytes:
        """Send ``payload`` to ``peer``'s call handler; await its reply (`MultiRaft.call`)."""
        if len(self._calls) >= self.max_concurrent:
            raise Overloaded("too many forwarded calls in flight")
        self._ids += 1
        rid = self._ids
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes] = loop.create_future()
        self._calls[rid] = fut
        try:
            if not self._transport.send(peer, FrameKind.CALL, encode_call(rid, False, payload)):
                raise PeerUnavailable(f"node {peer} is unreachable", outcome_unknown=False)
            handle = loop.call_later(
                timeout, _expire_call, fut, f"node {peer} did not answer within {timeout} s"
            )
            dog = CallWatchdog(fut, peer, abandon, check_every) if abandon else None
            try:
                return await fut
            finally:
                handle.cancel()
                if dog is not None:
                    dog.cancel()
        finally:
            self._calls.pop(rid, None)

    def on_call(self, peer: int, body: bytes) -> None:
        """A ``CALL`` frame from ``peer``: answer a clock probe at once, serve anything else."""
        rid, _, payload = decode_call(body)
        if is_clock_probe(payload):
            self._transport.send(peer, FrameKind.REPLY, self._watch.pong(rid, payload))
            return
        if len(self._serving) >= self.max_concurrent:
            err = b"overloaded: too many forwarded calls"
            self._transport.send(peer, FrameKind.REPLY, encode_call(rid, True, err))
            return
        task = asyncio.get_running_loop().create_task(self._serve(peer, rid, payload))
        self._serving[task] = None
        task.add_done_callback(self._served)

    def on_reply(self, peer: int, body: bytes) -> None:
        """A ``REPLY`` frame from ``peer``: a probe's answer, or a call's reply or error."""
        rid, is_error, payload = decode_call(body)
        if rid & PROBE_CALL_BIT:
            if not is_error:  # an error: a peer without probes (alive, no reading)
                self._watch.on_pong(peer, payload)
            return
        fut = self._calls.get(rid)
        if fut is not None and not fut.done():
            if is_error:
                fut.set_exception(RemoteCallError(payload))
            else:
                fut.set_result(payload)

    async def close(self) -> None:
        """Fail every call awaiting a reply; cancel every call being served and wait for it."""
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(PeerUnavailable("node shutting down"))
        self._calls.clear()
        serving = list(self._serving)
        for t in serving:
            t.cancel()
        await asyncio.gather(*serving, return_exceptions=True)

    def _served(self, task: asyncio.Task[None]) -> None:
        self._serving.pop(task, None)

    async def _serve(self, peer: int, rid: int, payload: bytes) -> None:
        handler = self.handler
        try:
            if handler is None:
                raise RemoteCallError(b"no call handler on this node")
            reply, is_error = await handler(peer, payload), False
        except RemoteCallError as e:
            reply, is_error = e.payload, True
        except Exception as e:  # reported to the caller, never swallowed silently
            log.exception(
                "forwarded call from node %d failed", peer, extra={"event": "peer_call_failed"}
            )
            reply, is_error = f"internal error: {type(e).__name__}".encode(), True
        self._transport.send(peer, FrameKind.REPLY, encode_call(rid, is_error, reply))
