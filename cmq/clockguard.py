"""`ClockGuard`: a node whose wall clock is far from its peers' stops leading until it is back.

Every ``interval`` seconds the guard judges the runtime's clock readings of the peers
(`raftlog.runtime.clocks.judge`: this node's clock minus the median of the cluster's, each
reading corrected by half its round trip). Beyond ``bound_ms`` the node is *unsafe*:

* it logs so at ERROR level once (and at WARNING when the clock is back within the bound);
* it hands the leadership of every group it leads to the most up-to-date recently active voter
  whose own clock is not off, retried while it still leads (`hand_off`);
* its `cmq.router.Router` runs nothing as a leader meanwhile (``clock_unsafe``), so no lease,
  delay or expiry is stamped with the wrong clock even in the moment before the hand-off;
* ``off_peers``: the peers this node sees beyond the bound; the leader balancer does not hand
  them leadership (`cmq.membership.Membership`'s ``avoid_leader``).

Why not refuse to campaign instead: the Raft core knows no clock and must stay pure; a node that
wins an election while unsafe serves nothing and hands leadership away within one interval, which
is as safe and needs no change to the core. Raft's own safety never depends on wall clocks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from raftlog.errors import RaftError
from raftlog.runtime import MultiRaft
from raftlog.runtime.clocks import ClockVerdict, judge

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
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._id = node_id
        self._raft = raft
        self.bound_ms = bound_ms
        self._interval = interval
        self._clock = clock
        self.verdict = ClockVerdict(0.0, 0, False, ())
        self.handoffs = 0
        """Leadership transfers this guard asked for (a metric)."""

    def unsafe(self) -> bool:
        """Whether this node's clock is judged off (it must not lead)."""
        return self.verdict.unsafe

    def off_peers(self) -> tuple[int, ...]:
        """Peers whose clocks this node sees beyond the bound from the median."""
        return self.verdict.off_peers

    def describe(self) -> dict[str, object]:
        """The clock section of ``/v1/status``."""
        v = self.verdict
        return {
            "offset_ms": round(v.offset_ms, 1),
            "bound_ms": self.bound_ms,
            "unsafe": v.unsafe,
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
        v = judge(
            self._raft.clock_readings(),
            now=self._clock(),
            bound_ms=self.bound_ms,
            max_rtt_ms=self.bound_ms,
        )
        self.verdict = v
        if v.unsafe and not before.unsafe:
            log.error(
                "CLOCK UNSAFE: node %d's clock is %+.0f ms from the median of %d peers "
                "(bound %.0f ms): it stops leading until the clock is back",
                self._id,
                v.offset_ms,
                v.peers,
                self.bound_ms,
            )
        elif before.unsafe and not v.unsafe:
            log.warning(
                "clock back: node %d is %+.0f ms from its peers' median; it may lead again",
                self._id,
                v.offset_ms,
            )
        if v.unsafe:
            self.hand_off()
        return v

    def hand_off(self) -> int:
        """Ask each group led here to transfer to its best eligible voter; returns how many
        transfers were asked for."""
        asked = 0
        avoid = set(self.verdict.off_peers)
        for g in sorted(self._raft.groups):
            driver = self._raft.groups[g]
            if driver.leader() != self._id:
                continue
            st = driver.status()
            if st.transferee:
                continue
            targets = [
                (ps.match, p)
                for p, ps in st.peers.items()
                if p != self._id
                and p in st.conf.voters
                and p not in avoid
                and ps.recent_active
                and not ps.learner
            ]
            if not targets:
                continue
            try:
                self._raft.transfer_leader(g, max(targets)[1])
            except RaftError as e:
                log.info("group %d: clock hand-off deferred: %s", g, e)
                continue
            asked += 1
        self.handoffs += asked
        return asked
