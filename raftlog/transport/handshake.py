"""The cluster-secret handshake that opens every peer connection (inside TLS when it is on).

The node with the smaller id dials; both prove they know the cluster secret without sending it,
each proof an HMAC-SHA256 over the other side's fresh nonce and both ids::

    dialer   → HELLO      (dialer id, nonce_d)
    acceptor → CHALLENGE  (nonce_a, HMAC(secret, "server" | nonce_d | acceptor | dialer))
    dialer   → AUTH       (HMAC(secret, "client" | nonce_a | dialer | acceptor))

The nonces also announce the peer protocols each side speaks
(`raftlog.transport.protocol`); the connection runs at the highest both speak, at least the
one this node requires. The acceptor checks the range before its challenge, so a mismatch
fails the dialer's handshake (it backs off); each side confirms the range is authentic with the
other's proof. Any failure raises (`AuthError`, `ProtocolMismatch`, a codec or I/O error) and
the caller closes the connection. Frames here are small: at most 4 KiB each.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Callable

from raftlog.transport.codec import (
    FRAME_HEADER,
    FrameKind,
    decode_hello,
    encode_hello,
    frame,
    parse_header,
)
from raftlog.transport.protocol import (
    ProtocolMismatch,
    ProtocolRange,
    announce,
    announced,
    negotiate,
)

_MAX_HANDSHAKE_FRAME = 4096


class AuthError(Exception):
    """A peer failed the cluster-secret handshake; ``peer`` names a known peer that failed its
    proof (None: the failure came before the peer was known)."""

    def __init__(self, why: str, peer: int | None = None) -> None:
        super().__init__(why)
        self.peer = peer


def _proof(secret: bytes, role: bytes, nonce: bytes, a: int, b: int) -> bytes:
    msg = role + nonce + a.to_bytes(8, "big") + b.to_bytes(8, "big")
    return hmac.new(secret, msg, hashlib.sha256).digest()


def _negotiate(peer: int, nonce: bytes, speaks: ProtocolRange, required: int) -> int:
    """The protocol of a connection with ``peer``, whose nonce is ``nonce``."""
    try:
        return negotiate(speaks, announced(nonce), required)
    except ProtocolMismatch as e:
        raise ProtocolMismatch(f"node {peer}: {e}") from None


async def _read_frame(reader: asyncio.StreamReader, max_frame: int) -> tuple[FrameKind, bytes]:
    header = await reader.readexactly(FRAME_HEADER.size)
    kind, size = parse_header(header, min(max_frame, _MAX_HANDSHAKE_FRAME))
    return kind, await reader.readexactly(size)


async def dial(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    me: int,
    peer: int,
    secret: bytes,
    speaks: ProtocolRange,
    required: int,
    max_frame: int,
) -> int:
    """The dialer's side with ``peer``; returns the protocol the connection runs at."""
    nonce = announce(speaks)
    writer.write(frame(FrameKind.HELLO, encode_hello(me, nonce)))
    await writer.drain()
    kind, body = await _read_frame(reader, max_frame)
    if kind is not FrameKind.CHALLENGE or len(body) != 64:
        raise AuthError("expected a challenge")
    server_nonce, server_proof = body[:32], body[32:]
    expected = _proof(secret, b"server", nonce, peer, me)
    if not hmac.compare_digest(server_proof, expected):
        raise AuthError(f"node {peer} does not know the cluster secret")
    # Both nonces are authenticated now (each side's proof covers the other's nonce).
    protocol = _negotiate(peer, server_nonce, speaks, required)
    writer.write(frame(FrameKind.AUTH, _proof(secret, b"client", server_nonce, me, peer)))
    await writer.drain()
    return protocol


async def accept(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    me: int,
    secret: bytes,
    speaks: ProtocolRange,
    required: int,
    max_frame: int,
    expects: Callable[[int], bool],
) -> tuple[int, int]:
    """The acceptor's side; ``expects(peer)`` says whether that node may dial here. Returns the
    authenticated peer and the protocol the connection runs at."""
    kind, body = await _read_frame(reader, max_frame)
    if kind is not FrameKind.HELLO:
        raise AuthError("expected hello")
    peer, client_nonce = decode_hello(body)
    if not expects(peer):
        raise AuthError(f"unexpected node id {peer}")
    # Refuse a protocol mismatch before the challenge, so the dialer sees a failed
    # handshake (and backs off); the range is confirmed authentic once AUTH checks out.
    protocol = _negotiate(peer, client_nonce, speaks, required)
    nonce = announce(speaks)
    proof = _proof(secret, b"server", client_nonce, me, peer)
    writer.write(frame(FrameKind.CHALLENGE, nonce + proof))
    await writer.drain()
    kind, body = await _read_frame(reader, max_frame)
    expected = _proof(secret, b"client", nonce, peer, me)
    if kind is not FrameKind.AUTH or not hmac.compare_digest(body, expected):
        raise AuthError(f"node {peer} failed authentication", peer)
    return peer, protocol
