"""The heal-phase liveness bound: how long a healed cluster may take to converge.

After the faults heal, a group must elect one leader, commit and apply a fresh proposal, and
bring every member to the leader's applied state. Two things take time:

* **Reaching a stable leader and committing**: a small, fixed number of election timeouts
  (`HEAL_TIMEOUTS` explains the count). Nothing about the run's history makes this longer.
* **Catching up the backlog**: the leader can only commit an entry of its own term once a
  majority holds it, so every follower missing the entries in between must receive them first.
  That takes as long as the configured replication rate says, and no configuration of the
  core makes it faster: ``window x entries-per-message`` entries per round trip, where a round
  trip on the healed network is at most two network delays and two follower fsyncs (the
  append may wait for the fsync in flight before its own).

The bound is the sum of the two: `heal_bound_ticks`. A run whose core stalls, falls back to one
message per heartbeat, or forgets to re-probe a follower exceeds it; a run whose windows are
simply small (one 60-byte message in flight, a 30-unit disk) is given the time its own
settings need, and no more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

HEAL_TIMEOUTS = 6
"""Default bound beyond catch-up, in election timeouts. A stale leader steps down within one
(check-quorum); a campaign starts within two (the randomized timeout is below twice the base); a
split vote or a rejected pre-vote round costs up to two more; the last covers committing the new
leader's no-op and the heal proposal and applying them on every member (a few round trips)."""

PROBE_ROUNDS = 4
"""Round trips a follower may spend in probe state (a conflict hint skips a whole term per
round; a snapshot is one round) before it replicates at the window's rate."""


@dataclass(frozen=True, slots=True)
class MemberLog:
    """What one member of a group durably holds when the faults heal."""

    last: int
    """Index of its last entry."""
    committed: int
    """Its commit index: every entry up to here matches the leader's (a longer suffix may
    conflict and be replaced)."""
    snapshot: int
    """Index of its durable snapshot (0 without one)."""


@dataclass(frozen=True, slots=True)
class CatchUp:
    """The replication a healed group still needs, and how fast its settings move it."""

    backlog: int
    """Entries the most-behind member must receive by appends."""
    per_round: int
    """Entries one round trip carries to a follower in replicate state."""
    round_ticks: int
    """Worst round trip on the healed network, in ticks."""

    @property
    def ticks(self) -> int:
        """Ticks to move the backlog at this rate, probing included (0 without a backlog)."""
        if self.backlog <= 0:
            return 0
        rounds = math.ceil(self.backlog / self.per_round) + PROBE_ROUNDS
        return rounds * self.round_ticks


def catch_up(
    members: Iterable[MemberLog],
    *,
    max_inflight_msgs: int,
    max_msg_bytes: int,
    max_entry_bytes: int,
    max_delay: int,
    disk_max: int,
    tick: int,
) -> CatchUp:
    """The catch-up one group needs after healing (times in simulated units, ``tick`` per tick).

    A member's need is bounded by ``longest last - max(its commit, smallest snapshot)``: entries
    up to its commit index match any leader's, and a member behind the leader's snapshot receives
    the snapshot (whose index is at least the smallest snapshot of the members) in one round.
    """
    logs = list(members)
    if not logs:
        return CatchUp(0, 1, 1)
    longest = max(m.last for m in logs)
    smallest_snapshot = min(m.snapshot for m in logs)
    backlog = max(longest - max(m.committed, smallest_snapshot) for m in logs)
    per_message = max(1, max_msg_bytes // max(1, max_entry_bytes))
    round_units = 2 * max_delay + 2 * disk_max
    return CatchUp(
        backlog=max(0, backlog),
        per_round=max(1, max_inflight_msgs * per_message),
        round_ticks=max(1, math.ceil(round_units / tick)),
    )


def heal_bound_ticks(heal_timeouts: int, election_tick: int, catch_ups: Iterable[CatchUp]) -> int:
    """The liveness bound: ``heal_timeouts`` election timeouts plus the slowest group's
    catch-up (groups replicate independently)."""
    return heal_timeouts * election_tick + max((c.ticks for c in catch_ups), default=0)
