"""`NodeClock`: this node's clock, the one every part of a node reads time from.

It implements raftlog's `raftlog.runtime.host.Clock` over another clock (the operating system's,
or a simulator's virtual one): ``monotonic`` for timeouts and liveness, and ``wall_ms``, the
time commands are stamped with (`cmq.routing.proposer.Proposer.stamp`, through the clock guard
`cmq.node.clockguard`), which the peers' clock probes report and the guard judges.

Two test hooks shift ``wall_ms``; both are unset in production:

* ``CMQ_CLOCK_OFFSET_MS``: a fixed offset (ms) the chaos runner gives a node when it starts;
* ``CMQ_CLOCK_FILE``: a file whose offset and drift a test changes while the node runs
  (`cmq.routing.clockfault`).

`node_clock` reads them when a node is built (`cmq.node.queue_node.QueueNode`), never at import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from cmq.errors import InvalidParameter
from cmq.routing import clockfault
from cmq.routing.clockfault import FileClock
from raftlog.runtime import SYSTEM_CLOCK, Clock

__all__ = ["CLOCK_OFFSET_ENV", "NodeClock", "clock_offset_ms", "node_clock"]

CLOCK_OFFSET_ENV = "CMQ_CLOCK_OFFSET_MS"
"""Milliseconds added to a node's wall clock (a clock-fault injection hook for the chaos
runner; unset or 0 in production). Read when the node is built."""


class NodeClock:
    """``base``'s clocks, its wall clock shifted by ``offset_ms`` plus the live offset of
    ``fault`` (a `FileClock`, whose drift counts on this clock's monotonic time), if any."""

    __slots__ = ("_base", "_fault", "offset_ms")

    def __init__(
        self, base: Clock = SYSTEM_CLOCK, *, offset_ms: int = 0, fault: FileClock | None = None
    ) -> None:
        self._base = base
        self.offset_ms = offset_ms
        self._fault = fault

    def monotonic(self) -> float:
        return self._base.monotonic()

    def wall_ms(self) -> int:
        ms = self._base.wall_ms() + self.offset_ms
        return ms if self._fault is None else ms + self._fault.offset_ms()


def clock_offset_ms(raw: str) -> int:
    """The value of `CLOCK_OFFSET_ENV` (empty: 0); `InvalidParameter` if not an integer."""
    try:
        return int(raw or "0")
    except ValueError:
        raise InvalidParameter(f"{CLOCK_OFFSET_ENV} must be an integer; got {raw!r}") from None


def node_clock(environ: Mapping[str, str] | None = None, base: Clock = SYSTEM_CLOCK) -> NodeClock:
    """The clock of a node built now: ``base`` with the test hooks ``environ`` (default: this
    process's environment) sets (see the module docstring)."""
    env = os.environ if environ is None else environ
    fault = clockfault.from_environment(env, base.monotonic)
    return NodeClock(base, offset_ms=clock_offset_ms(env.get(CLOCK_OFFSET_ENV, "")), fault=fault)
