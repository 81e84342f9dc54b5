"""`ClockGuard`: a node whose wall clock is far from its peers' stops leading until it is back.

Every ``interval`` seconds the guard judges the runtime's clock readings of the peers
(`raftlog.runtime.clocks.judge`: this node's clock minus the median of the cluster's, each
reading corrected by half its round trip). Beyond ``bound_ms`` the node is *unsafe*:

* it logs so at ERROR level once (and at WARNING when the clock is back within the bound);
* it stamps nothing: sends taken here are refused (`Unavailable`, nothing stored: the client
  tries another node) and housekeeping pauses;
* it hands the leadership of every group it leads to the most up-to-date recently active voter
  whose own clock is not off, retried while it still leads (`hand_off`);
* its `cmq.routing.router.Router` runs nothing as a leader meanwhile (``clock_unsafe``), so no
lease,
  delay or expiry is stamped with the wrong clock even in the moment before the hand-off;
* ``off_peers``: the peers this node sees beyond the bound; the leader balancer does not hand
  them leadership (`cmq.node.membership.Membership`'s ``avoid_leader``).

A step of the clock is caught at once, before any peer reading can show it: the guard keeps
this node's wall clock minus its monotonic clock as last verified (`trusted`); a change of more
than the bound since then is a step, and the clock is not trusted until readings taken after
the step agree with it (drift within the bound is absorbed at each check). This closes the
second or so a peer reading would take: a single command stamped hours ahead would move a
queue's clock (the largest time any command carried) hours ahead.

A clock is not trusted *before* it was ever verified either: a node with peers starts
unverified (there is no earlier reading to detect a step against: a VM that boots before NTP
has synced), and is trusted once readings taken after its start confirm it (`_confirmed`: at
least one peer within the bound of this clock, and the median not against it). A node without
peers (a one-node cluster) is trusted at once.

`stamp` is the one way a time enters a command: it reads the clock once and checks *that*
reading (a check and a later second reading could straddle a step).

Why not refuse to campaign instead: the Raft core knows no clock and must stay pure; a node that
wins an election while unsafe serves nothing and hands leadership away within one interval, which
is as safe and needs no change to the core. Raft's own safety never depends on wall clocks.
"""

from __future__ import annotations

import asyncio
import logging

from raftlog.errors import RaftError
from raftlog.runtime import Clock, ClockReading, ClockVerdict, MultiRaft, judge

log = logging.getLogger("cmq.clock")

DEFAULT_BOUND_MS = 500.0
"""The default skew bound (``CMQ_CLOCK_BOUND_MS`` / `NodeConfig.clock_bound_ms`)."""


class ClockGuard:
    """Judges this node's clock against its peers' and keeps an unsafe node from leading."""

    def __init__(
        self,
        node_id: int,
        raft: MultiRaft,
        bound_ms: float = DEFAULT_BOUND_MS,
        *,
        clock: Clock,
        interval: float = 0.5,
    ) -> None:
        """``clock``: this node's (`cmq.routing.clock.NodeClock`): the wall clock it guards
        (the one commands are stamped with and the peers' probes report) and the monotonic
        clock it checks that against."""
        self._id = node_id
        self._raft = raft
        self.bound_ms = bound_ms
        self._interval = interval
        self._clock = clock.monotonic
        self._wall_ms = clock.wall_ms
        self.verdict = ClockVerdict(0.0, 0, False, ())
        self._base = self._skew()  # wall minus monotonic (ms) when last verified
        self._seen = self._base  # wall minus monotonic (ms) at the last check
        self._stepped_at: float | None = None
        # Monotonic time since when this clock waits for its first confirmation (None: it
        # was confirmed, or has nobody to be confirmed by).
        self._unverified_since: float | None = self._clock()
        self._told_unverified = False
        self.handoffs = 0
        """Leadership transfers this guard asked for (a metric)."""

    def _skew(self) -> float:
        return self._wall_ms() - self._clock() * 1000.0

    def stepped(self) -> bool:
        """Whether the clock moved by more than the bound since it was last verified."""
        return abs(self._skew() - self._base) > self.bound_ms

    def verified(self) -> bool:
        """Whether this clock was confirmed by peers since the start (or has no peers)."""
        if self._unverified_since is not None and not self._raft.peers():
            self._unverified_since = None  # nobody to confirm it: a one-node cluster
            self._base = self._skew()
        return self._unverified_since is None

    def confirmed_now(self) -> bool:
        """Whether this clock is trusted and the current readings confirm it (at least one
        peer within the bound of it, the median not against it); a node without peers: trusted.
        For decisions that take this clock over a queue's (`cmq.fsm.commands.Retime`)."""
        if not self.trusted():
            return False
        if not self._raft.peers():
            return True
        return self._confirmed(self._raft.clock_readings(), float("-inf"), self._clock())

    def stamp(self) -> int | None:
        """The time for a command stamped now (ms), or None while this clock is not trusted.
        One reading, checked itself against the verified base: never a check and a second
        reading that could straddle a step."""
        mono = self._clock()
        wall = self._wall_ms()
        if self.verdict.unsafe or not self.verified():
            return None
        if abs(wall - mono * 1000.0 - self._base) > self.bound_ms:
            return None
        return wall

    def unsafe(self) -> bool:
        """Whether this node's clock is judged off by its peers' readings."""
        return self.verdict.unsafe

    def trusted(self) -> bool:
        """Whether this node may stamp times and lead: verified since its start, not judged
        off, not just stepped."""
        return self.verified() and not self.verdict.unsafe and not self.stepped()

    def off_peers(self) -> tuple[int, ...]:
        """Peers whose clocks this node sees beyond the bound from the median."""
        return self.verdict.off_peers

    def describe(self) -> dict[str, object]:
        """The clock section of ``/v1/status``."""
        v = self.verdict
        return {
            "offset_ms": round(v.offset_ms, 1),
            "bound_ms": self.bound_ms,
            "unsafe": not self.trusted(),
            "stepped": self.stepped(),
            "verified": self.verified(),
            "peers_read": v.peers,
            "off_peers": list(v.off_peers),
        }

    async def run(self) -> None:
        """Check every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self._interval)
            self.check()

    def check(self) -> ClockVerdict:
        """Judge the current readings, log a change of state, hand leadership off if unsafe."""
        before = self.verdict
        readings = self._raft.clock_readings()
        now = self._clock()
        v = judge(readings, now=now, bound_ms=self.bound_ms, max_rtt_ms=self.bound_ms)
        self.verdict = v
        self._note_step(now)
        self._verify_start(readings, now)
        self._verify_steps(readings, v, now)
        if v.unsafe and not before.unsafe:
            log.error(
                "CLOCK UNSAFE: node %d's clock is %+.0f ms from the median of %d peers "
                "(bound %.0f ms): it stops leading until the clock is back",
                self._id,
                v.offset_ms,
                v.peers,
                self.bound_ms,
                extra={"event": "clock_unsafe"},
            )
        elif before.unsafe and not v.unsafe:
            log.warning(
                "clock back: node %d is %+.0f ms from its peers' median; it may lead again",
                self._id,
                v.offset_ms,
                extra={"event": "clock_recovered"},
            )
        if not self.trusted():
            self.hand_off()
        return v

    def _confirmed(
        self, readings: tuple[ClockReading, ...], since: float, now: float, *, all_of: int = 0
    ) -> bool:
        """Whether readings taken after ``since`` confirm this clock: at least ``all_of`` of
        them (and one), at least one peer within the bound of this clock (with a single reading
        the median is always this node's own, so agreement must be seen, not inferred), and
        their median not beyond the bound."""
        after = [r for r in readings if r.at > since]
        checked = judge(after, now=now, bound_ms=self.bound_ms, max_rtt_ms=self.bound_ms)
        if not checked.peers or checked.peers < all_of or checked.unsafe:
            return False
        return any(abs(r.offset_ms) <= self.bound_ms and r.rtt_ms <= self.bound_ms for r in after)

    def _note_step(self, now: float) -> None:
        """A step since the last check makes every reading taken before it moot: each judged
        the clock as it was then. A clock waiting to be confirmed (at its start, or after a
        step) waits for readings taken from now on: else readings of the clock before a step
        that came just before this check would confirm the stepped one (the whole-node
        simulator's seed 11027: a node started cut off, its clock stepped a minute back a few
        milliseconds before the first check after the partition healed, the readings of the
        unstepped clock confirmed it, and it led and stamped leases a minute back)."""
        skew = self._skew()
        if abs(skew - self._seen) > self.bound_ms:
            if self._unverified_since is not None:
                self._unverified_since = now
            if self._stepped_at is not None:
                self._stepped_at = now
        self._seen = skew

    def _verify_start(self, readings: tuple[ClockReading, ...], now: float) -> None:
        since = self._unverified_since
        if since is None or self.verified():
            return
        if self._confirmed(readings, since, now):
            self._unverified_since = None
            self._base, self._stepped_at = self._skew(), None
            log.info("node %d: clock confirmed by its peers' readings: it may stamp", self._id)
        elif now - since > self._interval * 10 and not self._told_unverified:
            self._told_unverified = True
            log.warning(
                "node %d: clock not yet confirmed by its peers (%d readings since start): "
                "it stamps nothing and does not lead until they agree",
                self._id,
                len([r for r in readings if r.at > since]),
                extra={"event": "clock_unconfirmed"},
            )

    def _verify_steps(
        self, readings: tuple[ClockReading, ...], v: ClockVerdict, now: float
    ) -> None:
        skew = self._skew()
        if abs(skew - self._base) <= self.bound_ms:
            self._base, self._stepped_at = skew, None  # drift within the bound: absorbed
            return
        if self._stepped_at is None:
            self._stepped_at = now
            log.error(
                "CLOCK STEPPED: node %d's clock moved %+.0f ms against its monotonic clock: "
                "it stamps nothing and does not lead until its peers' readings agree",
                self._id,
                skew - self._base,
                extra={"event": "clock_stepped"},
            )
            return
        if self._confirmed(readings, self._stepped_at, now, all_of=v.peers):
            log.warning(
                "node %d: the stepped clock agrees with the peers: trusted",
                self._id,
                extra={"event": "clock_recovered"},
            )
            self._base, self._stepped_at = skew, None

    def hand_off(self) -> int:
        """Ask each group led here to transfer to its best eligible voter; returns how many
        transfers were asked for."""
        asked = 0
        avoid = set(self.verdict.off_peers)
        for g in sorted(self._raft.groups):
            try:
                if self._raft.groups[g].hand_over(avoid):
                    asked += 1
            except RaftError as e:
                log.info("group %d: clock hand-off deferred: %s", g, e)
        self.handoffs += asked
        return asked
