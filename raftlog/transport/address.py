"""Where a peer listens: `Address` (``host:port``) and `parse_peers` (``1=host:port,...``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    @staticmethod
    def parse(text: str) -> Address:
        """``host:port`` → Address; raises ``ValueError`` on malformed input."""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        return Address(host.strip("[]"), int(port))


def parse_peers(text: str) -> dict[int, Address]:
    """``1=host:port,2=host:port`` → {1: Address, 2: Address}; raises ``ValueError`` on a
    malformed part (no ``=``, a non-numeric id, or a bad address)."""
    peers: dict[int, Address] = {}
    for part in text.split(","):
        nid, sep, addr = part.partition("=")
        if not sep or not nid.strip().isdigit():
            raise ValueError(f"expected ID=HOST:PORT, got {part!r}")
        peers[int(nid)] = Address.parse(addr.strip())
    return peers
