"""asyncio transport: one authenticated TCP connection per node pair, carrying every group.

Who dials: the node with the smaller id connects to the larger; the larger only accepts. Both
directions then share that one connection. On connect the two sides prove knowledge of the
cluster secret to each other (HMAC over fresh nonces, `raftlog.transport.handshake`); a peer
without it is refused and logged. Settings and counters: `raftlog.transport.config`.

With TLS (`TransportConfig.server_ssl` and ``client_ssl``, both or neither) every connection is
TLS first and the secret handshake runs inside it: the caller's contexts decide what is
verified (mutual authentication against a cluster CA in `cmq.node.peer_tls`). The event loop does
the TLS handshakes (``open_connection``/``start_server`` with ``ssl``; uvloop's ``start_tls``, which
would let this module see the accepting side's failures, hangs handshakes under load). So a
failed TLS handshake is seen, logged and counted by the dialing node (for every pair, the one
with the smaller id): it fails there either in the handshake or, with TLS 1.3, when the
accepting side refuses its certificate, on the first read. The accepting side only drops the
connection (asyncio logs it at debug level). A failed handshake is logged as a warning once per
reason until the peer connects again, not on every redial (`PeerLink.note_failure`,
`Transport._note_refused`).

Each peer has its own bounded outbound buffer and writer task, so a slow or dead peer cannot
stall traffic to the others. `Transport.send` never blocks: when a buffer is full it returns
False and the caller treats the peer as unreachable (Raft retransmits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable

from raftlog.transport import handshake
from raftlog.transport.address import Address, parse_peers
from raftlog.transport.codec import (
    FRAME_HEADER,
    CodecError,
    FrameKind,
    decode_chunk,
    frame_header,
    parse_header,
    split_chunks,
)
from raftlog.transport.config import PeerStats, TransportConfig
from raftlog.transport.handshake import AuthError
from raftlog.transport.link import MAX_REASONS, PeerLink
from raftlog.transport.protocol import (
    ProtocolMismatch,
)
from raftlog.transport.resume import decode_state

__all__ = [
    "Address",
    "AuthError",
    "FrameHandler",
    "PeerStats",
    "TlsError",
    "Transport",
    "TransportConfig",
    "parse_peers",
]

log = logging.getLogger("raftlog.transport")

FrameHandler = Callable[[int, FrameKind, bytes], None]
"""Called on the event loop for each frame received: (peer id, kind, body)."""


class TlsError(Exception):
    """A dialed connection's TLS handshake failed (a certificate refused, no TLS spoken)."""


# What a failed connect or handshake can raise (RuntimeError: uvloop, on a closed transport).
_CONNECTION_ERRORS = (
    OSError,
    TimeoutError,
    RuntimeError,
    CodecError,
    AuthError,
    TlsError,
    ProtocolMismatch,
    asyncio.IncompleteReadError,
)

_MAX_REFUSED_HOSTS = 1024
"""Remote hosts whose refusals are remembered (to log each once); forgotten beyond this."""


def _unbound(peer: int, kind: FrameKind, body: bytes) -> None:
    """The frame handler of a transport not bound yet (`Transport.start` refuses to run so)."""
    raise RuntimeError(f"a {kind.name} frame from node {peer} arrived before bind")


def _reason(e: BaseException) -> str:
    """A failure as one short line (the exception's type when it says nothing)."""
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class Transport:
    """Peer connections of one node. Owns every task it starts; `close` cancels them all."""

    def __init__(
        self,
        node_id: int,
        listen: Address,
        peers: dict[int, Address],
        secret: bytes,
        on_frame: FrameHandler | None = None,
        *,
        cfg: TransportConfig | None = None,
        on_peer_down: Callable[[int], None] | None = None,
    ) -> None:
        """``on_frame`` and ``on_peer_down`` may be given here or later with `bind` (a host
        builds its transport before it can name its handlers); frames need a handler by
        `start`."""
        if not secret:
            raise ValueError("a cluster secret is required")
        self.cfg = cfg or TransportConfig()
        if (self.cfg.server_ssl is None) != (self.cfg.client_ssl is None):
            raise ValueError("TLS needs both a server and a client context (or neither)")
        self.id = node_id
        self.listen = listen
        self.secret = secret
        self.on_frame: FrameHandler = on_frame if on_frame is not None else _unbound
        self.on_peer_down = on_peer_down
        self.peers = {
            pid: PeerLink(pid, addr, self.cfg) for pid, addr in peers.items() if pid != node_id
        }
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._transfers = 0
        self.refused = 0
        self.required_protocol = 1
        """Connections below this peer protocol are refused (`require_protocol`)."""
        """Accepted connections refused before the peer was authenticated: the secret handshake
        failed or named an unexpected node (TLS handshakes failing here are not seen: see the
        module docstring)."""
        # Remote host -> why its connections were refused since one was last accepted.
        self._refused_hosts: dict[str, set[str]] = {}

    @property
    def tls(self) -> bool:
        """Peer connections are TLS (`TransportConfig.server_ssl`, ``client_ssl``)."""
        return self.cfg.tls

    def bind(self, on_frame: FrameHandler, on_peer_down: Callable[[int], None]) -> None:
        """Where arriving frames and lost connections go (`PeerTransport.bind`); before
        `start`."""
        self.on_frame = on_frame
        self.on_peer_down = on_peer_down

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen for peers and start one writer (and, for larger ids, one dialer) per peer."""
        if self.on_frame is _unbound:
            raise ValueError("the transport has no frame handler: bind one before start")
        if self.cfg.server_ssl is None:
            self._server = await asyncio.start_server(
                self._accept, self.listen.host, self.listen.port, reuse_address=True
            )
        else:
            self._server = await asyncio.start_server(
                self._accept,
                self.listen.host,
                self.listen.port,
                reuse_address=True,
                ssl=self.cfg.server_ssl,
                ssl_handshake_timeout=self.cfg.handshake_timeout,
            )
        for peer in self.peers.values():
            self._start_peer(peer)

    def _start_peer(self, peer: PeerLink) -> None:
        peer.tasks.add(self._spawn(self._write_loop(peer), f"peer-writer-{peer.id}"))
        if self.id < peer.id:
            peer.tasks.add(self._spawn(self._dial_loop(peer), f"peer-dialer-{peer.id}"))

    def add_peer(self, peer_id: int, address: Address) -> None:
        """Know ``peer_id`` at ``address`` from now on (a node that joined at run time); a known
        peer's address is updated (the next connection attempt uses it). Call after `start`."""
        if peer_id == self.id or self._closed:
            return
        peer = self.peers.get(peer_id)
        if peer is not None:
            peer.address = address
            return
        peer = self.peers[peer_id] = PeerLink(peer_id, address, self.cfg)
        if self._server is not None:
            self._start_peer(peer)

    def remove_peer(self, peer_id: int) -> None:
        """Forget ``peer_id``: close its connection and stop its tasks (a removed node)."""
        peer = self.peers.pop(peer_id, None)
        if peer is None:
            return
        if peer.writer is not None:
            peer.writer.close()
        for t in peer.tasks:
            t.cancel()

    async def close(self) -> None:
        """Stop listening, cancel every task, close every connection. Idempotent."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        for peer in self.peers.values():
            if peer.writer is not None:
                peer.writer.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            # Bounded: a connection the server still counts must not hold up a shutdown.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()

    def _spawn(self, coro: object, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- sending -----------------------------------------------------------------------------------
    def send(self, peer_id: int, kind: FrameKind, body: bytes) -> bool:
        """Queue a frame for ``peer_id``. False when the peer is unknown or its buffer is full."""
        peer = self.peers.get(peer_id)
        if peer is None or self._closed:
            return False
        if len(body) > self.cfg.chunk_bytes:
            self._transfers += 1
            return peer.enqueue_bulk(
                split_chunks(self._transfers, kind, body, self.cfg.chunk_bytes)
            )
        return peer.enqueue(frame_header(kind, len(body)), body)

    def is_connected(self, peer_id: int) -> bool:
        peer = self.peers.get(peer_id)
        return peer is not None and peer.writer is not None

    def stats(self) -> dict[int, PeerStats]:
        return {pid: p.stats for pid, p in sorted(self.peers.items())}

    async def _write_loop(self, peer: PeerLink) -> None:
        while True:
            await peer.wakeup.wait()
            peer.wakeup.clear()
            while peer.buffer or peer.bulk.pending():
                await peer.connected.wait()
                writer = peer.writer
                if writer is None:
                    continue
                if writer.is_closing():
                    self._disconnected(peer, writer)
                    continue
                chunk = peer.drain_buffer(1 << 20) if peer.buffer else []
                chunk += peer.next_bulk_frame()
                try:
                    writer.writelines(chunk)
                    await writer.drain()
                except (ConnectionError, OSError, RuntimeError):
                    # RuntimeError: uvloop's answer to writing on a transport closed under us.
                    # Either way this connection is gone; the writer must live on for the next.
                    self._disconnected(peer, writer)
                    continue
                except Exception:
                    # Never let the writer die: a dead writer silences this peer for good.
                    log.exception("unexpected error writing to node %d; reconnecting", peer.id)
                    self._disconnected(peer, writer)
                    continue
                peer.stats.frames_sent += len(chunk) // 2  # header + body per frame
                peer.stats.bytes_sent += sum(len(c) for c in chunk)

    # -- connections ------------------------------------------------------------------------------
    async def _connect(self, peer: PeerLink) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to ``peer`` (OSError or TimeoutError when it cannot be made), then,
        with TLS, its TLS handshake (`TlsError`)."""
        host, port = peer.address.host, peer.address.port
        if self.cfg.client_ssl is None:
            async with asyncio.timeout(self.cfg.connect_timeout):
                return await asyncio.open_connection(host, port)
        try:
            async with asyncio.timeout(self.cfg.connect_timeout + self.cfg.handshake_timeout):
                return await asyncio.open_connection(
                    host,
                    port,
                    ssl=self.cfg.client_ssl,
                    server_hostname=host,
                    ssl_handshake_timeout=self.cfg.handshake_timeout,
                )
        except (ssl.SSLError, ConnectionResetError, ConnectionAbortedError) as e:
            # The TCP connection was made (refused or unreachable peers raise other errors)
            # and the TLS handshake failed: a certificate refused, no TLS spoken, timed out.
            raise TlsError(_reason(e)) from None

    def _dials(self, peer: PeerLink) -> bool:
        """Whether ``peer``'s dialer should go on: the transport is open and still knows it.

        Asked at every turn, not left to cancellation alone: a dialer that missed its
        cancellation would redial forever while `close` waited for it (Python 3.11's
        ``wait_for`` loses a cancellation that lands in the loop turn its inner call finishes;
        the project bans it for ``asyncio.timeout``, and this check stays as a second line)."""
        return not self._closed and self.peers.get(peer.id) is peer

    async def _dial_loop(self, peer: PeerLink) -> None:
        delay = self.cfg.backoff_initial
        while self._dials(peer):
            try:
                reader, writer = await self._connect(peer)
            except TlsError as e:
                peer.note_failure(f"TLS: {e}")
                delay = await self._back_off(delay)
                continue
            except (OSError, TimeoutError):
                delay = await self._back_off(delay)  # unreachable: not a handshake failure
                continue
            except Exception as e:
                # Never let the dialer die: a dead dialer cuts this peer off for good.
                peer.note_failure(f"unexpected: {_reason(e)}")
                log.debug("connecting to node %d", peer.id, exc_info=True)
                delay = await self._back_off(delay)
                continue
            if not self._dials(peer):
                writer.close()
                return
            try:
                async with asyncio.timeout(self.cfg.handshake_timeout):
                    await self._client_handshake(reader, writer, peer.id)
            except _CONNECTION_ERRORS as e:
                # With TLS 1.3 a server refusing our certificate says so after our side of
                # the TLS handshake finished: here, as an SSLError or a closed connection on
                # the first read.
                reason = _reason(e)
                if self.tls and isinstance(e, ssl.SSLError):
                    reason = "TLS: " + reason
                elif self.tls and isinstance(e, (asyncio.IncompleteReadError, ConnectionError)):
                    reason += " (closed by the peer: did it refuse this node's certificate?)"
                peer.note_failure(reason)
                peer.stats.auth_failures += isinstance(e, AuthError)
                writer.close()
                delay = await self._back_off(delay)
                continue
            if not self._dials(peer):
                writer.close()
                return
            peer.note_success()
            began = asyncio.get_running_loop().time()
            try:
                await self._serve_connection(peer, reader, writer)
            except Exception:
                # A bug in a frame handler must not end this peer's dialer for good.
                log.exception("connection to node %d failed; reconnecting", peer.id)
            if asyncio.get_running_loop().time() - began < self.cfg.backoff_max:
                # Closed right after the handshake (e.g. the peer refused it after AUTH):
                # back off rather than redial in a tight loop.
                delay = await self._back_off(delay)
            else:
                delay = self.cfg.backoff_initial

    async def _back_off(self, delay: float) -> float:
        """Wait ``delay`` seconds before the next dial; returns the wait after that one (twice
        as long, at most ``backoff_max``)."""
        await asyncio.sleep(delay)
        return min(delay * 2, self.cfg.backoff_max)

    def _note_refused(self, peername: object, reason: str) -> None:
        """Count a refused connection; log it as a warning the first time this reason is seen
        for the host since a connection from it was last accepted (not on every redial)."""
        self.refused += 1
        host = str(peername[0]) if isinstance(peername, tuple) and peername else str(peername)
        seen = self._refused_hosts.get(host)
        if seen is None:
            if len(self._refused_hosts) >= _MAX_REFUSED_HOSTS:
                self._refused_hosts.clear()
            seen = self._refused_hosts[host] = set()
        if reason in seen or len(seen) >= MAX_REASONS:
            log.debug("refused a peer connection from %s again: %s", host, reason)
            return
        seen.add(reason)
        log.warning(
            "refused a peer connection from %s: %s",
            host,
            reason,
            extra={"event": "peer_connection_refused"},
        )

    def _accepted_from(self, peername: object) -> None:
        host = str(peername[0]) if isinstance(peername, tuple) and peername else str(peername)
        if self._refused_hosts.pop(host, None) is not None:
            log.warning("accepted a peer connection from %s again", host)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Owned from the first moment: `close` must be able to end a connection that is still
        # in its handshake, or the server's ``wait_closed`` would wait for it.
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        peername = writer.get_extra_info("peername")
        try:
            try:
                async with asyncio.timeout(self.cfg.handshake_timeout):
                    peer_id = await self._server_handshake(reader, writer)
            except _CONNECTION_ERRORS as e:
                tls = self.tls and isinstance(e, ssl.SSLError)
                self._note_refused(peername, ("TLS: " if tls else "") + _reason(e))
                writer.close()
                return
            self._accepted_from(peername)
            peer = self.peers.get(peer_id)
            if peer is None or self._closed:
                # Removed while it authenticated, or closing (a cancellation lost to a
                # handshake finishing in the same turn: see `_dials`).
                writer.close()
                return
            if peer.writer is not None:
                peer.writer.close()  # the peer reconnected: the old connection is dead
            await self._serve_connection(peer, reader, writer)
        except asyncio.CancelledError:
            # `close` cancels us. End normally: asyncio's stream server (3.11) asks a finished
            # connection task for its exception and logs a cancelled one as an error.
            writer.close()
            if not self._closed:
                raise

    async def _serve_connection(
        self, peer: PeerLink, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer.writer = writer
        peer.stats.connects += 1
        peer.bulk.disconnected()
        peer.send_state(connect=True)  # the peer resumes its chunked frames from this
        peer.connected.set()
        peer.wakeup.set()
        try:
            while True:
                header = await reader.readexactly(FRAME_HEADER.size)
                kind, size = parse_header(header, self.cfg.max_frame)
                body = await reader.readexactly(size)
                peer.stats.frames_received += 1
                if kind is FrameKind.CHUNK:
                    whole = peer.reassembly.add(decode_chunk(body))
                    if whole is not None:
                        peer.send_state(connect=False)  # the sender may forget it
                        self.on_frame(peer.id, *whole)
                elif kind is FrameKind.CHUNK_STATE:
                    peer.bulk.on_state(decode_state(body))
                    peer.wakeup.set()
                else:
                    self.on_frame(peer.id, kind, body)
        except (OSError, asyncio.IncompleteReadError, CodecError) as e:
            if not self._closed:
                log.info("connection to node %d lost: %s", peer.id, e or type(e).__name__)
        finally:
            self._disconnected(peer, writer)

    def _disconnected(self, peer: PeerLink, writer: asyncio.StreamWriter) -> None:
        if peer.writer is writer:
            peer.writer = None
            # Chunked frames continue on the next connection where the receiver's state says
            # (`raftlog.transport.resume`).
            peer.bulk.disconnected()
            peer.connected.clear()
            if len(peer.bulk) and not self._closed:
                asyncio.get_running_loop().call_later(
                    self.cfg.resume_seconds, self._expire_bulk, peer, peer.stats.connects
                )
            if self.on_peer_down is not None and not self._closed:
                self.on_peer_down(peer.id)
        writer.close()

    def _expire_bulk(self, peer: PeerLink, connects: int) -> None:
        """Drop the chunked frames of a peer still disconnected since the drop at ``connects``."""
        if peer.writer is None and peer.stats.connects == connects and len(peer.bulk):
            log.info("node %d disconnected: dropping its chunked frames", peer.id)
            peer.bulk.clear()

    def require_protocol(self, protocol: int) -> None:
        """From now on, refuse connections that would run below ``protocol`` (the cluster
        enabled something that needs it); connections already up are not cut."""
        self.required_protocol = protocol

    async def _client_handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer_id: int
    ) -> None:
        protocol = await handshake.dial(
            reader,
            writer,
            me=self.id,
            peer=peer_id,
            secret=self.secret,
            speaks=self.cfg.protocols,
            required=self.required_protocol,
            max_frame=self.cfg.max_frame,
        )
        known = self.peers.get(peer_id)
        if known is not None:
            known.stats.protocol = protocol

    async def _server_handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> int:
        try:
            peer_id, protocol = await handshake.accept(
                reader,
                writer,
                me=self.id,
                secret=self.secret,
                speaks=self.cfg.protocols,
                required=self.required_protocol,
                max_frame=self.cfg.max_frame,
                expects=lambda p: p in self.peers and p < self.id,
            )
        except AuthError as e:
            known = self.peers.get(e.peer) if e.peer is not None else None
            if known is not None:
                known.stats.auth_failures += 1
            raise
        known = self.peers.get(peer_id)
        if known is not None:
            known.stats.protocol = protocol
        return peer_id
