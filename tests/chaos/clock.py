"""The ``clock`` fault: a running node's wall clock jumps or drifts (``CMQ_CLOCK_FILE``).

Each episode moves the clock of one node (half of the time a group leader) while it runs,
through the live clock file `cmq.routing.clockfault` re-reads every second, and puts it back on
heal:

* ``clock-jump``: forward or back by seconds (1-10 s), minutes (1-30 min) or hours (1-6 h):
  far beyond the skew bound, so the node's clock guard must take it out of leadership;
* ``clock-drift``: the clock runs fast or slow by 2,000-50,000 ppm for the hold (2-6 s), so the
  skew it reaches stays under the 500 ms bound (`MAX_DRIFT_SKEW_MS`).

Both count as ``clock`` episodes too. What must hold whatever the clocks say: nothing
acknowledged is lost and no message is delivered again after its ack was confirmed (the
checker's ``lost`` and ``redelivered_after_ack``). Leases: the runner measures lease windows
with its own clock while leaders stamp them with theirs, so a lease can end early in real time
by up to the stamping leader's skew. A run whose clock faults stayed under the bound (drift
only) must show no lease overlap beyond the skew it reached (`RunResult.failures` checks with
that tolerance); a run with jumps beyond the bound reports lease overlaps without failing on
them (until the guard deposes the node, about a second, its leases are stamped off).
Exclusive: no other fault runs meanwhile, so each episode's effect stands alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import Act, NodeFault, undo

MAX_DRIFT_SKEW_MS = 300.0
"""The largest skew a drift episode reaches (50,000 ppm over 6 s), under the 500 ms bound."""

_JUMP_UNITS = ((1_000, 10), (60_000, 30), (3_600_000, 6))  # (unit ms, up to n units)


@dataclass
class ClockFault(NodeFault):
    name: str = "clock"
    exclusive: bool = True
    weight: int = 2
    takes_node_away: bool = False  # the node keeps running

    def act(self, cluster: ChaosCluster, nid: int, rng: random.Random) -> Act:
        sign = rng.choice([-1, 1])
        hold = rng.uniform(2.0, 6.0)
        if rng.random() < 0.5:
            unit, most = rng.choice(_JUMP_UNITS)
            offset = sign * rng.randint(1, most) * unit
            cluster.set_clock(nid, offset_ms=offset)
            kind, what = "clock-jump", f"clock of node {nid} jumps {_span(offset)} (back on heal)"
        else:
            ppm = sign * rng.randint(2_000, 50_000)
            cluster.set_clock(nid, drift_ppm=float(ppm))
            cluster.drift_skew_ms = max(cluster.drift_skew_ms, abs(ppm) * 1e-6 * hold * 1000)
            kind, what = "clock-drift", f"clock of node {nid} drifts {ppm:+d} ppm (reset on heal)"
        return Act(what, hold, undo(lambda: cluster.set_clock(nid)), kind)


def _span(offset_ms: int) -> str:
    for unit, label in ((3_600_000, "h"), (60_000, "min"), (1_000, "s")):
        if abs(offset_ms) >= unit:
            return f"{offset_ms / unit:+.0f}{label}"
    return f"{offset_ms:+d}ms"
