"""Peer protocol negotiation inside the handshake's nonces (pure).

Each side of a connection announces the range of peer protocols it speaks, and the connection
runs at the highest protocol both speak (``min(max_a, max_b)``, if that is at least
``max(min_a, min_b)``; otherwise the connection is refused, loudly, on both sides).

Where the ranges travel: in the 32-byte nonces the ``HELLO`` and ``CHALLENGE`` frames already
carry (`announce`: an 8-byte marker, the two protocol numbers as u16, then 20 random bytes). A
node of a release before negotiation sends a nonce of 32 random bytes and accepts any 32-byte
nonce from its peer, so the frames keep their layout and such a node still connects: a nonce
without the marker means protocol 1, the only protocol those releases speak (a random nonce
starts with the marker with probability 2^-64). The handshake's HMAC proofs cover both nonces,
so the announced ranges are authenticated with the cluster secret like everything else in it;
160 random bits per nonce remain.

A node may also *require* a minimum protocol (the cluster enabled a feature that needs it): a
connection that would run below it is refused — a node too old for the cluster cannot join.
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass

MARKER = b"RLPROTO\x01"
LEGACY_PROTOCOL = 1
"""The protocol of a peer whose nonce carries no range (releases before negotiation)."""
_RANGE = struct.Struct(">HH")
NONCE_BYTES = 32


@dataclass(frozen=True, slots=True)
class ProtocolRange:
    """The peer protocols a node speaks, ``low`` to ``high`` inclusive."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high <= 0xFFFF:
            raise ValueError(f"bad protocol range {self.low}-{self.high}")

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"


LEGACY_RANGE = ProtocolRange(LEGACY_PROTOCOL, LEGACY_PROTOCOL)
"""What releases before negotiation speak."""


class ProtocolMismatch(Exception):
    """Two nodes have no protocol in common, or the common one is below what is required."""


def announce(speaks: ProtocolRange) -> bytes:
    """A fresh handshake nonce announcing ``speaks``."""
    nonce = MARKER + _RANGE.pack(speaks.low, speaks.high)
    return nonce + secrets.token_bytes(NONCE_BYTES - len(nonce))


def announced(nonce: bytes) -> ProtocolRange:
    """The range a peer's nonce announces (`LEGACY_PROTOCOL` for a nonce without one)."""
    if len(nonce) != NONCE_BYTES or not nonce.startswith(MARKER):
        return LEGACY_RANGE
    low, high = _RANGE.unpack_from(nonce, len(MARKER))
    try:
        return ProtocolRange(low, high)
    except ValueError:
        raise ProtocolMismatch(
            f"the peer announced an invalid protocol range {low}-{high}"
        ) from None


def negotiate(ours: ProtocolRange, theirs: ProtocolRange, required: int = 1) -> int:
    """The protocol a connection runs at; `ProtocolMismatch` (saying why) when none fits."""
    best = min(ours.high, theirs.high)
    if best < max(ours.low, theirs.low):
        raise ProtocolMismatch(
            f"no common peer protocol: this node speaks {ours}, the peer {theirs}"
        )
    if best < required:
        raise ProtocolMismatch(
            f"the peer speaks protocols {theirs}, below protocol {required}, which this "
            f"cluster requires (an enabled feature needs it): upgrade that node"
        )
    return best
