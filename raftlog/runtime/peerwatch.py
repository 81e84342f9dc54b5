"""`PeerWatch`: when each peer was last heard from, and its wall clock as probes read it.

`MultiRaft` feeds it every frame's arrival (`heard`), sends a clock probe to every peer about
twice a second (`probe`: a CALL frame marked `CLOCK_PROBE`, its call id flagged with
`PROBE_CALL_BIT`) and answers peers' probes with its own wall clock (`pong`). A pong gives a
`ClockReading` (the peer's clock minus ours, corrected by half the round trip). Only the latest
probe per peer is outstanding: an older probe's late answer is ignored. A peer running a version
without probes answers with an error reply: it proves the peer alive and gives no reading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from raftlog.errors import PeerUnavailable
from raftlog.runtime.clocks import ClockReading
from raftlog.runtime.host import Clock
from raftlog.transport.codec import (
    PROBE_CALL_BIT,
    FrameKind,
    decode_clock_ping,
    decode_clock_pong,
    encode_call,
    encode_clock_ping,
    encode_clock_pong,
)

Send = Callable[[int, FrameKind, bytes], bool]


class PeerWatch:
    """Liveness and clock readings of the peers (see the module docstring), timed by ``clock``
    (monotonic seconds for silences and round trips)."""

    __slots__ = ("_clock", "_heard", "_probes", "_readings", "_seq", "started_at", "wall_clock")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.wall_clock: Callable[[], int] = clock.wall_ms
        """This node's wall clock in ms, as pongs report it: ``clock.wall_ms`` unless replaced
        (an application whose commands carry another clock sets its own)."""
        self.started_at = clock.monotonic()
        self._heard: dict[int, float] = {}
        self._seq = 0
        self._probes: dict[int, tuple[int, float]] = {}  # peer -> (seq, sent at)
        self._readings: dict[int, ClockReading] = {}

    def heard(self, peer: int) -> None:
        """A frame from ``peer`` arrived now."""
        self._heard[peer] = self._clock.monotonic()

    def silent_for(self, peer: int) -> float:
        """Seconds since the last frame from ``peer`` (since `started_at` if none came)."""
        return self._clock.monotonic() - self._heard.get(peer, self.started_at)

    def forget(self, peer: int) -> None:
        self._heard.pop(peer, None)
        self._probes.pop(peer, None)
        self._readings.pop(peer, None)

    def probe(self, send: Send, peers: Iterable[int]) -> None:
        """Send one clock probe to each of ``peers``."""
        now = self._clock.monotonic()
        for peer in peers:
            self._seq += 1
            body = encode_call(PROBE_CALL_BIT | self._seq, False, encode_clock_ping(self._seq))
            if send(peer, FrameKind.CALL, body):
                self._probes[peer] = (self._seq, now)

    def pong(self, rid: int, payload: bytes) -> bytes:
        """The REPLY frame body answering probe call ``rid`` (payload: the probe): its
        sequence number and our clock."""
        return encode_call(
            rid, False, encode_clock_pong(decode_clock_ping(payload), self.wall_clock())
        )

    def on_pong(self, peer: int, body: bytes) -> None:
        """Record the reading a probe's reply payload from ``peer`` gives."""
        seq, wall = decode_clock_pong(body)
        sent = self._probes.get(peer)
        if sent is None or sent[0] != seq:
            return
        del self._probes[peer]
        now = self._clock.monotonic()
        rtt_ms = (now - sent[1]) * 1000.0
        offset = wall - (self.wall_clock() - rtt_ms / 2)
        self._readings[peer] = ClockReading(peer, offset, rtt_ms, now)

    def readings(self) -> tuple[ClockReading, ...]:
        """The latest reading of each peer that answered a probe, by peer id."""
        return tuple(self._readings[p] for p in sorted(self._readings))


class CallWatchdog:
    """Asks ``abandon`` every ``every`` seconds while ``fut`` (a forwarded call's reply to
    ``peer``) is pending; a reason fails it with `PeerUnavailable` (outcome unknown).

    A check that runs late by more than ``every`` (this node's own event loop was stalled: a
    long apply, a GC pause, a loaded machine) does not judge: frames that arrived meanwhile may
    still sit unread in the socket, so the peer's silence would be this node's own. It looks
    again ``every`` seconds later, once the loop has read what came in."""

    __slots__ = ("_abandon", "_due", "_every", "_fut", "_handle", "_peer")

    def __init__(
        self,
        fut: asyncio.Future[bytes],
        peer: int,
        abandon: Callable[[], str | None],
        every: float,
    ) -> None:
        self._fut, self._peer, self._abandon, self._every = fut, peer, abandon, every
        self._due = 0.0
        self._handle = self._arm()

    def _arm(self) -> asyncio.TimerHandle:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self._every
        return loop.call_later(self._every, self._check)

    def _check(self) -> None:
        if self._fut.done():
            return
        late = asyncio.get_running_loop().time() - self._due
        why = self._abandon() if late <= self._every else None
        if why:
            self._fut.set_exception(PeerUnavailable(f"call to node {self._peer} abandoned: {why}"))
        else:
            self._handle = self._arm()

    def cancel(self) -> None:
        self._handle.cancel()
