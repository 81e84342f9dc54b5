"""One node's end of a `raftlog.transport.memory.MemoryNetwork`: `MemoryTransport`, the
in-memory twin of `raftlog.transport.peer.Transport` (a `raftlog.runtime.host.PeerTransport`).

It keeps what the node knows (its peers, their counters, the protocol versions it speaks and
requires, its frame and peer-down handlers) and hands frames to the network, which carries them
over the pair's link and calls `deliver` and `peer_down` on the other end. The links, their
delays and their faults are the network's (`raftlog.transport.memory`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from raftlog.transport.address import Address
from raftlog.transport.codec import FrameKind
from raftlog.transport.config import PeerStats
from raftlog.transport.protocol import LEGACY_RANGE, ProtocolRange

if TYPE_CHECKING:
    from raftlog.transport.memory import MemoryNetwork

FrameHandler = Callable[[int, FrameKind, bytes], None]
"""(peer id, frame kind, body): where a transport hands each frame that arrives."""


def _ignore_frame(peer: int, kind: FrameKind, body: bytes) -> None:
    raise RuntimeError(f"a {kind.name} frame from node {peer} arrived before bind")


class MemoryTransport:
    """One node's end of a `MemoryNetwork` (a `PeerTransport`; see the module docstring)."""

    __slots__ = (
        "_closed",
        "_net",
        "_on_frame",
        "_on_peer_down",
        "_peers",
        "_started",
        "_stats",
        "id",
        "protocols",
        "refused",
        "required_protocol",
    )

    def __init__(
        self,
        network: MemoryNetwork,
        node_id: int,
        peers: Iterable[int] = (),
        *,
        protocols: ProtocolRange = LEGACY_RANGE,
    ) -> None:
        self._net = network
        self.id = node_id
        self.protocols = protocols
        self.required_protocol = 1
        self._peers: dict[int, Address | None] = {p: None for p in sorted(peers) if p != node_id}
        self._stats: dict[int, PeerStats] = {}
        self._on_frame: FrameHandler = _ignore_frame
        self._on_peer_down: Callable[[int], None] | None = None
        self._started = False
        self._closed = False
        self.refused = 0

    # -- PeerTransport ---------------------------------------------------------------------------
    @property
    def peers(self) -> Collection[int]:
        return self._peers.keys()

    @property
    def tls(self) -> bool:
        return False

    def bind(self, on_frame: FrameHandler, on_peer_down: Callable[[int], None]) -> None:
        self._on_frame = on_frame
        self._on_peer_down = on_peer_down

    async def start(self) -> None:
        """Join the network: links to known peers come up after their connect delay."""
        if self._on_frame is _ignore_frame:
            raise ValueError("the transport has no frame handler: bind one before start")
        if self._closed:
            raise ValueError("a closed transport cannot start again (make a new one)")
        self._started = True
        self._net._attach(self)

    async def close(self) -> None:
        """Leave the network; peers see the connections close. Idempotent."""
        self.crash(notify=True)

    def crash(self, *, notify: bool = False) -> None:
        """Leave the network at once, as a process that died: with ``notify`` its peers see the
        connections reset; without, they learn only when this node comes back (or never)."""
        if self._closed:
            return
        self._closed = True
        self._net._detach(self, notify)

    def send(self, peer: int, kind: FrameKind, body: bytes) -> bool:
        if self._closed or not self._started or peer not in self._peers:
            return False
        if not self._net._send(self.id, peer, kind, body):
            return False
        st = self.stats_of(peer)
        st.frames_sent += 1
        st.bytes_sent += len(body)
        return True

    def is_connected(self, peer: int) -> bool:
        return peer in self._peers and not self._closed and self._net._connected(self.id, peer)

    def add_peer(self, peer: int, address: Address) -> None:
        if peer == self.id or self._closed:
            return
        self._peers[peer] = address
        if self._started:
            self._net._peer_added(self.id, peer)

    def remove_peer(self, peer: int) -> None:
        if peer not in self._peers:
            return
        del self._peers[peer]
        self._stats.pop(peer, None)
        self._net._peer_removed(self.id, peer)

    def require_protocol(self, protocol: int) -> None:
        """Refuse connections below ``protocol`` from now on (connections up are not cut)."""
        self.required_protocol = protocol

    def stats(self) -> Mapping[int, PeerStats]:
        return {p: self.stats_of(p) for p in sorted(self._peers)}

    # -- the network's side ----------------------------------------------------------------------
    def known(self) -> Collection[int]:
        return self._peers.keys()

    def stats_of(self, peer: int) -> PeerStats:
        st = self._stats.get(peer)
        if st is None:
            st = self._stats[peer] = PeerStats()
        return st

    def deliver(self, peer: int, kind: FrameKind, body: bytes) -> None:
        self.stats_of(peer).frames_received += 1
        self._on_frame(peer, kind, body)

    def peer_down(self, peer: int) -> None:
        if not self._closed and self._on_peer_down is not None:
            self._on_peer_down(peer)
