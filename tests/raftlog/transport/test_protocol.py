"""Peer protocol negotiation in the handshake nonces (`raftlog.transport.protocol`)."""

from __future__ import annotations

import asyncio
import os

import pytest

from raftlog.transport.codec import FrameKind
from raftlog.transport.peer import Address, Transport, TransportConfig
from raftlog.transport.protocol import (
    LEGACY_PROTOCOL,
    MARKER,
    NONCE_BYTES,
    ProtocolMismatch,
    ProtocolRange,
    announce,
    announced,
    negotiate,
)
from tests.ports import free_ports


def test_a_nonce_carries_the_range_and_stays_random() -> None:
    a, b = announce(ProtocolRange(1, 3)), announce(ProtocolRange(1, 3))
    assert len(a) == NONCE_BYTES and a != b  # 20 random bytes each
    assert announced(a) == ProtocolRange(1, 3)


def test_a_nonce_without_the_marker_is_a_release_before_negotiation() -> None:
    legacy = os.urandom(NONCE_BYTES)
    assert not legacy.startswith(MARKER)
    assert announced(legacy) == ProtocolRange(LEGACY_PROTOCOL, LEGACY_PROTOCOL)


def test_the_connection_runs_at_the_highest_protocol_both_speak() -> None:
    assert negotiate(ProtocolRange(1, 3), ProtocolRange(2, 5)) == 3
    assert negotiate(ProtocolRange(1, 1), ProtocolRange(1, 2)) == 1
    with pytest.raises(ProtocolMismatch, match="no common peer protocol: this node speaks 3-4"):
        negotiate(ProtocolRange(3, 4), ProtocolRange(1, 2))


def test_a_peer_below_the_required_protocol_is_refused() -> None:
    assert negotiate(ProtocolRange(1, 2), ProtocolRange(1, 2), required=2) == 2
    with pytest.raises(ProtocolMismatch, match="below protocol 2, which this cluster requires"):
        negotiate(ProtocolRange(1, 2), ProtocolRange(1, 1), required=2)


def test_an_invalid_announced_range_is_refused() -> None:
    bad = MARKER + bytes([0, 5, 0, 2]) + bytes(20)
    with pytest.raises(ProtocolMismatch, match="invalid protocol range 5-2"):
        announced(bad)


# -- in the handshake, on loopback --------------------------------------------------------------
class _Node:
    def __init__(self, nid: int, addrs: dict[int, Address], speaks: ProtocolRange) -> None:
        self.got: list[bytes] = []
        cfg = TransportConfig(protocols=speaks)
        self.t = Transport(nid, addrs[nid], addrs, b"s3cret", self.on_frame, cfg=cfg)

    def on_frame(self, peer: int, kind: FrameKind, body: bytes) -> None:
        self.got.append(body)


async def _pair(a: ProtocolRange, b: ProtocolRange, required_b: int = 1) -> tuple[_Node, _Node]:
    addrs = {i + 1: Address("127.0.0.1", p) for i, p in enumerate(free_ports(2))}
    one, two = _Node(1, addrs, a), _Node(2, addrs, b)
    two.t.require_protocol(required_b)
    await one.t.start()
    await two.t.start()
    one.t.send(2, FrameKind.RAFT, b"hello")
    for _ in range(40):
        if two.got:
            break
        await asyncio.sleep(0.05)
    return one, two


async def _close(*nodes: _Node) -> None:
    for n in nodes:
        await n.t.close()


async def test_connections_run_at_the_highest_common_protocol() -> None:
    one, two = await _pair(ProtocolRange(1, 3), ProtocolRange(2, 5))
    try:
        assert two.got == [b"hello"]
        assert one.t.stats()[2].protocol == 3 and two.t.stats()[1].protocol == 3
    finally:
        await _close(one, two)


async def test_a_node_of_a_release_before_negotiation_connects_at_protocol_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Node 1 sends a nonce of 32 random bytes, as releases before negotiation do."""
    from raftlog.transport import handshake

    real = handshake.announce
    monkeypatch.setattr(
        handshake, "announce", lambda speaks: os.urandom(32) if speaks.high == 1 else real(speaks)
    )
    one, two = await _pair(ProtocolRange(1, 1), ProtocolRange(1, 2))
    try:
        assert two.got == [b"hello"]
        assert two.t.stats()[1].protocol == 1
    finally:
        await _close(one, two)


async def test_no_common_protocol_or_one_below_the_required_is_refused_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    one, two = await _pair(ProtocolRange(3, 4), ProtocolRange(1, 2))
    try:
        assert two.got == [] and not two.t.is_connected(1)
        assert "no common peer protocol" in caplog.text
    finally:
        await _close(one, two)
    caplog.clear()
    one, two = await _pair(ProtocolRange(1, 1), ProtocolRange(1, 2), required_b=2)
    try:
        assert two.got == [] and not two.t.is_connected(1)
        assert "below protocol 2, which this cluster requires" in caplog.text
    finally:
        await _close(one, two)
