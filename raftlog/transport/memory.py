"""The in-memory twin of the peer transport's network: a `MemoryNetwork` per simulated cluster,
its links and their faults (`NetFaults`), and what it did (`NetStats`). Each node's end of it,
a `MemoryTransport` (a `raftlog.runtime.host.PeerTransport`), lives in
`raftlog.transport.memory_transport` and is re-exported here.

A pair of nodes shares one *link*, as they share one TCP connection in `Transport`: frames
between the two go in order, each at most once, after a seeded delay (a slow frame holds back
the ones behind it, as on a TCP stream). Everything is a callback on the event loop the network
is given (virtual time under the simulators) and every draw comes from its seeded
``random.Random``, so a run replays exactly.

A link is *up* once both nodes run a transport that knows the other and a connect delay (the
handshake, the dialer's backoff) has passed. `MemoryTransport.send` returns False when the peer
is unknown, its link is not up, or the frames in flight on it reach the bounds; a frame may also
be lost on its way (``NetFaults.loss``, the harsher fault: nobody is told). Faults:

- `cut` / `heal` (a partition between two nodes): the link breaks at once, what was in flight
  is lost and both sides' `PeerDown` handlers are called; it reconnects after the heal.
- `stall` / `unstall` a link, `pause` / `resume` a node (a stopped process, a wedged switch):
  frames wait on the link, in order, and nobody is told; they arrive once it flows again.
- a node's transport closing or crashing: its links break; its peers are told
  (``notify=True``, a reset connection) or not (a power loss: the peer's side stays "up" and
  what it sends is lost, until the node comes back and its new connection replaces the old one,
  which tells the peer then).

Only nodes that know each other connect (the real transport refuses an unknown peer), and only
when their protocol ranges meet (`raftlog.transport.protocol.negotiate`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from raftlog.transport.codec import FrameKind
from raftlog.transport.memory_transport import FrameHandler, MemoryTransport
from raftlog.transport.protocol import LEGACY_RANGE, ProtocolMismatch, ProtocolRange, negotiate

__all__ = ["FrameHandler", "MemoryNetwork", "MemoryTransport", "NetFaults", "NetStats"]

log = logging.getLogger("raftlog.transport")


@dataclass(frozen=True, slots=True)
class NetFaults:
    """Timings (seconds of the network's loop) and faults of every link of a `MemoryNetwork`."""

    delay: tuple[float, float] = (0.0005, 0.01)
    """A frame's delay, drawn uniformly (its link's earlier frames still go first)."""
    slow: float = 0.002
    """The chance that a frame is a straggler, delayed by a further `slow_delay` (with every
    frame behind it on its link: a retransmission stalls a TCP stream the same way)."""
    slow_delay: tuple[float, float] = (0.05, 0.5)
    loss: float = 0.0
    """The chance that a frame is lost on its way, unnoticed."""
    connect_delay: tuple[float, float] = (0.001, 0.3)
    """How long a link takes to come up once it may (handshakes, a redial's backoff)."""
    max_frames: int = 65536
    """Frames in flight one way on a link; more are refused (`send` returns False)."""
    max_bytes: int = 64 << 20
    """Bytes in flight one way on a link; more are refused."""


@dataclass(slots=True)
class _Way:
    """One direction of a link: frames in flight, in order, each with when it is due."""

    frames: deque[tuple[float, FrameKind, bytes]] = field(default_factory=deque)
    nbytes: int = 0
    last_due: float = 0.0
    timer: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class _Link:
    """The connection between nodes ``a < b``; ``epoch`` counts its incarnations."""

    a: int
    b: int
    up: bool = False
    epoch: int = 0
    connecting: asyncio.TimerHandle | None = None
    ways: dict[int, _Way] = field(default_factory=dict)
    """By the receiving node."""
    ends: dict[int, MemoryTransport] = field(default_factory=dict)
    """The transports of this incarnation of the connection, by node."""

    def other(self, node: int) -> int:
        return self.b if node == self.a else self.a


@dataclass(slots=True)
class NetStats:
    """What the network did (every counter since it was made)."""

    sent: int = 0
    delivered: int = 0
    lost: int = 0
    """Frames lost on their way (`NetFaults.loss`)."""
    refused: int = 0
    """Sends that returned False."""
    dropped: int = 0
    """Frames in flight when their link broke."""
    resets: int = 0
    connects: int = 0
    handler_errors: int = 0
    """Frames whose handler raised (logged; the link is reset, as the real transport does)."""


class MemoryNetwork:
    """The links of one simulated cluster (see the module docstring)."""

    __slots__ = (
        "_cut",
        "_links",
        "_loop",
        "_nodes",
        "_paused",
        "_rng",
        "_stalled",
        "faults",
        "stats",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, rng: random.Random, faults: NetFaults | None = None
    ) -> None:
        self._loop = loop
        self._rng = rng
        self.faults = faults or NetFaults()
        """Used for every frame sent and every connection made from now on (replaceable)."""
        self._nodes: dict[int, MemoryTransport] = {}
        self._links: dict[tuple[int, int], _Link] = {}
        self._cut: set[tuple[int, int]] = set()
        self._stalled: set[tuple[int, int]] = set()
        self._paused: set[int] = set()
        self.stats = NetStats()

    def transport(
        self,
        node_id: int,
        peers: Iterable[int] = (),
        *,
        protocols: ProtocolRange = LEGACY_RANGE,
    ) -> MemoryTransport:
        """A new transport for ``node_id`` knowing ``peers`` (itself skipped), not started."""
        return MemoryTransport(self, node_id, peers, protocols=protocols)

    # -- faults ----------------------------------------------------------------------------------
    def cut(self, a: int, b: int) -> None:
        """Partition ``a`` from ``b`` (both ways): their link breaks and stays down until `heal`."""
        pair = _pair(a, b)
        if pair in self._cut or a == b:
            return
        self._cut.add(pair)
        self._reset(pair, notify=True)

    def isolate(self, node: int, others: Iterable[int]) -> None:
        """`cut` ``node`` from each of ``others``."""
        for o in others:
            self.cut(node, o)

    def heal(self, a: int, b: int) -> None:
        """End the partition of ``a`` and ``b``: they reconnect."""
        pair = _pair(a, b)
        if pair in self._cut:
            self._cut.discard(pair)
            self._maybe_connect(pair)

    def heal_all(self) -> None:
        """End every partition, stall and pause."""
        for pair in sorted(self._cut):
            self.heal(*pair)
        for pair in sorted(self._stalled):
            self.unstall(*pair)
        for node in sorted(self._paused):
            self.resume(node)

    def is_cut(self, a: int, b: int) -> bool:
        return _pair(a, b) in self._cut

    def cuts(self) -> list[tuple[int, int]]:
        """The partitioned pairs ``(a, b)``, ``a < b``, sorted."""
        return sorted(self._cut)

    def stall(self, a: int, b: int) -> None:
        """Hold every frame between ``a`` and ``b`` (the link stays up; nobody is told)."""
        self._stalled.add(_pair(a, b))

    def unstall(self, a: int, b: int) -> None:
        pair = _pair(a, b)
        if pair in self._stalled:
            self._stalled.discard(pair)
            self._kick(pair)

    def pause(self, node: int) -> None:
        """Hold every frame to and from ``node`` until `resume` (links stay up)."""
        self._paused.add(node)

    def resume(self, node: int) -> None:
        if node in self._paused:
            self._paused.discard(node)
            for pair in sorted(self._links):
                if node in pair:
                    self._kick(pair)

    def is_paused(self, node: int) -> bool:
        return node in self._paused

    def is_up(self, a: int, b: int) -> bool:
        """Whether the link of ``a`` and ``b`` is up (frames flow unless stalled or paused)."""
        link = self._links.get(_pair(a, b))
        return link is not None and link.up and len(link.ends) == 2

    # -- nodes -----------------------------------------------------------------------------------
    def _attach(self, t: MemoryTransport) -> None:
        old = self._nodes.get(t.id)
        if old is not None and old is not t:
            raise ValueError(f"node {t.id} already has a running transport")
        self._nodes[t.id] = t
        for pair, link in sorted(self._links.items()):
            if t.id in pair and link.up:
                # A connection of an earlier incarnation, dead without the peer knowing: the
                # new one replaces it, and the peer learns of the loss now.
                self._reset(pair, notify=True)
        for peer in sorted(t.known()):
            self._maybe_connect(_pair(t.id, peer))

    def _detach(self, t: MemoryTransport, notify: bool) -> None:
        if self._nodes.get(t.id) is not t:
            return
        del self._nodes[t.id]
        for pair, link in sorted(self._links.items()):
            if t.id not in pair:
                continue
            if notify or not link.up:
                self._reset(pair, notify=True)
            else:
                # Silently: the peer still sees the link up, and what it sends is lost.
                self._clear(link)
                link.ends.pop(t.id, None)

    def _peer_added(self, node: int, peer: int) -> None:
        """``node``'s transport learned ``peer``: they connect if nothing keeps them apart."""
        self._maybe_connect(_pair(node, peer))

    def _peer_removed(self, node: int, peer: int) -> None:
        """``node``'s transport forgot ``peer``: their link breaks (both ends are told)."""
        self._reset(_pair(node, peer), notify=True)

    # -- links -----------------------------------------------------------------------------------
    def _link(self, pair: tuple[int, int]) -> _Link:
        link = self._links.get(pair)
        if link is None:
            link = self._links[pair] = _Link(*pair)
        return link

    def _may_connect(self, pair: tuple[int, int]) -> bool:
        a, b = pair
        ta, tb = self._nodes.get(a), self._nodes.get(b)
        return (
            ta is not None
            and tb is not None
            and pair not in self._cut
            and b in ta.known()
            and a in tb.known()
        )

    def _maybe_connect(self, pair: tuple[int, int]) -> None:
        link = self._link(pair)
        if link.up or link.connecting is not None or not self._may_connect(pair):
            return
        lo, hi = self.faults.connect_delay
        link.connecting = self._loop.call_later(self._rng.uniform(lo, hi), self._connect, pair)

    def _connect(self, pair: tuple[int, int]) -> None:
        link = self._link(pair)
        link.connecting = None
        if link.up or not self._may_connect(pair):
            return
        ta, tb = self._nodes[pair[0]], self._nodes[pair[1]]
        try:
            protocol = min(
                negotiate(ta.protocols, tb.protocols, ta.required_protocol),
                negotiate(tb.protocols, ta.protocols, tb.required_protocol),
            )
        except ProtocolMismatch as e:
            # Refused by the side that requires more; redialed only after a reset or heal.
            log.warning("nodes %d and %d refuse to connect: %s", pair[0], pair[1], e)
            ta.refused += 1
            tb.refused += 1
            return
        link.up = True
        link.epoch += 1
        link.ends = {pair[0]: ta, pair[1]: tb}
        link.ways = {pair[0]: _Way(), pair[1]: _Way()}
        self.stats.connects += 1
        for t, other in ((ta, pair[1]), (tb, pair[0])):
            st = t.stats_of(other)
            st.connects += 1
            st.protocol = protocol

    def _clear(self, link: _Link) -> None:
        for way in link.ways.values():
            if way.timer is not None:
                way.timer.cancel()
                way.timer = None
            self.stats.dropped += len(way.frames)
            way.frames.clear()
            way.nbytes = 0

    def _reset(self, pair: tuple[int, int], notify: bool) -> None:
        """Break the link: drop what is in flight, tell both ends (when ``notify``), and
        reconnect if nothing keeps them apart."""
        link = self._links.get(pair)
        if link is None:
            return
        if link.connecting is not None:
            link.connecting.cancel()
            link.connecting = None
        if link.up:
            self.stats.resets += 1
            self._clear(link)
            ends = link.ends
            link.up = False
            link.ends = {}
            link.ways = {}
            if notify:
                for node, t in sorted(ends.items()):
                    if self._nodes.get(node) is t:
                        self._loop.call_soon(t.peer_down, link.other(node))
        self._maybe_connect(pair)

    def _connected(self, frm: int, to: int) -> bool:
        """Whether ``frm`` sees its link to ``to`` up (also when ``to`` died silently)."""
        link = self._links.get(_pair(frm, to))
        return link is not None and link.up and link.ends.get(frm) is self._nodes.get(frm)

    def _flows(self, pair: tuple[int, int]) -> bool:
        return pair not in self._stalled and not (set(pair) & self._paused)

    def _kick(self, pair: tuple[int, int]) -> None:
        """Schedule the next frame each way of a link that flows again."""
        link = self._links.get(pair)
        if link is None or not link.up:
            return
        for to in sorted(link.ways):
            self._schedule(link, to)

    def _schedule(self, link: _Link, to: int) -> None:
        way = link.ways[to]
        if way.timer is not None or not way.frames or not self._flows((link.a, link.b)):
            return
        due = way.frames[0][0]
        way.timer = self._loop.call_at(
            max(due, self._loop.time()), self._arrive, link, to, link.epoch
        )

    def _send(self, frm: int, to: int, kind: FrameKind, body: bytes) -> bool:
        pair = _pair(frm, to)
        link = self._links.get(pair)
        self.stats.sent += 1
        if link is None or not link.up or link.ends.get(frm) is not self._nodes.get(frm):
            self.stats.refused += 1
            return False
        f = self.faults
        way = link.ways[to]
        if len(way.frames) >= f.max_frames or way.nbytes + len(body) > f.max_bytes:
            self.stats.refused += 1
            link.ends[frm].stats_of(to).dropped_full += 1
            return False
        if to not in link.ends:
            self.stats.lost += 1  # the peer is gone, silently: its end of the link is dead
            return True
        rng = self._rng
        if f.loss and rng.random() < f.loss:
            self.stats.lost += 1
            return True
        delay = rng.uniform(*f.delay)
        if f.slow and rng.random() < f.slow:
            delay += rng.uniform(*f.slow_delay)
        due = max(self._loop.time() + delay, way.last_due)
        way.last_due = due
        way.frames.append((due, kind, body))
        way.nbytes += len(body)
        self._schedule(link, to)
        return True

    def _arrive(self, link: _Link, to: int, epoch: int) -> None:
        if link.epoch != epoch or not link.up:
            return
        way = link.ways[to]
        way.timer = None
        if not self._flows((link.a, link.b)):
            return  # held: `_kick` reschedules it
        _, kind, body = way.frames.popleft()
        way.nbytes -= len(body)
        frm = link.other(to)
        t = link.ends.get(to)
        if t is not None and self._nodes.get(to) is t:
            self.stats.delivered += 1
            try:
                t.deliver(frm, kind, body)
            except Exception:
                # As `Transport` does with a handler's bug: log it, drop the connection.
                self.stats.handler_errors += 1
                log.exception("handling a %s frame from node %d on node %d", kind.name, frm, to)
                self._reset((link.a, link.b), notify=True)
                return
        if link.epoch == epoch and link.up:
            self._schedule(link, to)


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)
