"""Peer protocol negotiation in the handshake nonces (`raftlog.transport.protocol`)."""

from __future__ import annotations

import os

import pytest

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
