"""Peer transport: TCP between the nodes, one connection per pair, typed frames.

What a host outside raftlog names (its face, with `raftlog.runtime`'s): `Address` and
`parse_peers` (where peers listen), `TransportConfig` (the transport's settings) and
`ProtocolRange` (the peer protocol versions a node speaks). The transport itself is opened by
`raftlog.runtime.MultiRaft`.
"""

from raftlog.transport.address import Address, parse_peers
from raftlog.transport.config import TransportConfig
from raftlog.transport.protocol import ProtocolRange

__all__ = ["Address", "ProtocolRange", "TransportConfig", "parse_peers"]
