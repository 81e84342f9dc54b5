"""Wall-clock sanity across peers: readings in, a verdict out (pure; no clock is read here).

The runtime probes every peer's wall clock about twice a second (probe calls on the peer
connection, `raftlog.runtime.peerwatch`, `MultiRaft.clock_readings`). A reading is the peer's
clock minus ours, taken when the pong arrives and corrected by half the round trip, so its
error is at most half the round trip (readings with a long round trip are ignored).

`judge` compares this node with the cluster: the median of every fresh reading and this node's
own (offset 0). With an even count the median is the middle value nearer 0, so two nodes that
disagree never accuse each other: a node is declared off only when most of the nodes it can
hear agree among themselves and not with it. Raft's safety never depends on these clocks; the
verdict guards what does (lease and delay deadlines stamped by a leader's wall clock).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClockReading:
    """One probe of ``peer``: its wall clock minus ours (ms) when the pong arrived, corrected
    by half the round trip ``rtt_ms``; ``at`` is the monotonic time (s) it was taken."""

    peer: int
    offset_ms: float
    rtt_ms: float
    at: float


@dataclass(frozen=True, slots=True)
class ClockVerdict:
    """What the readings say about this node's clock.

    ``offset_ms``: this node's clock minus the cluster's median (positive: ahead). ``unsafe``:
    ``|offset_ms|`` exceeds the bound. ``peers``: how many fresh readings were used (0: no
    evidence, never unsafe). ``off_peers``: the peers whose clocks are beyond the bound from the
    median (e.g. not to be handed leadership)."""

    offset_ms: float
    peers: int
    unsafe: bool
    off_peers: tuple[int, ...]


def _median_toward_zero(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    if n % 2:
        return values[n // 2]
    a, b = values[n // 2 - 1], values[n // 2]
    return a if abs(a) <= abs(b) else b


def judge(
    readings: Iterable[ClockReading],
    *,
    now: float,
    bound_ms: float,
    max_age: float = 5.0,
    max_rtt_ms: float = 500.0,
) -> ClockVerdict:
    """The verdict from ``readings`` at monotonic time ``now``: readings older than
    ``max_age`` seconds or with a round trip over ``max_rtt_ms`` are left out."""
    fresh = [r for r in readings if now - r.at <= max_age and r.rtt_ms <= max_rtt_ms]
    if not fresh:
        return ClockVerdict(0.0, 0, False, ())
    median = _median_toward_zero([0.0, *(r.offset_ms for r in fresh)])
    off = tuple(sorted(r.peer for r in fresh if abs(r.offset_ms - median) > bound_ms))
    return ClockVerdict(-median, len(fresh), abs(median) > bound_ms, off)
