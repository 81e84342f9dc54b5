"""The runtime simulation (`raftlog.sim.runtime_sim`) with quiescence and node liveness on.

The hosts are the production `MultiRaft` with ``quiesce=True``: its `Ticker` sends every peer a
liveness frame per tick over the simulated network (so cut, lost, delayed like any frame),
skips the quiesced groups, wakes them all when a peer turns suspect or its connection resets,
and sends the ``QUIESCE`` heartbeat of the groups going idle; a follower stops ticking when its
leader's arrives. A node that loses power is seen by its peers as a reset connection, or (half
the time) only as silence, until liveness suspects it. Clients work in bursts with idle gaps,
so groups quiesce and wake again all through the faults.

Checked, besides everything `RuntimeSim` checks: no follower stays quiesced more than
``LIMIT + 10`` ticks while its leader's node is down, paused or cut off from it (a quiesced
group must not wait forever on a dead leader); and no replica stays quiesced more than a few
ticks while it is still recovering from a restart (`raftlog.core.recovery`: a quiesced
replica stops asking its peers, so it would stay out of elections, and the loss of any other
node would then leave the group without a quorum). Planted bugs these checks catch, each a
`Ticker` subclass its hosts run: `PlantedNoWake` (a suspect or lost peer wakes nothing) and
`PlantedQuiesceRecovering` (a recovering replica accepts quiescence).
``python -m raftlog.sim.quiesce_sim --seeds N [--nodes 3|5]``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from raftlog.core import NONE, Role
from raftlog.runtime.multiraft import MultiRaft
from raftlog.runtime.ticks import Ticker
from raftlog.sim.runtime_sim import (
    LIVENESS_TICKS,
    TICK,
    RuntimeSim,
    RuntimeSimConfig,
    report_seeds,
    seeds_config,
    seeds_of,
    seeds_parser,
)

LIMIT = LIVENESS_TICKS
"""Liveness limit in ticks (`RuntimeConfig.liveness_ticks`)."""
BUSY = 1.0
IDLE = 1.5
"""Seconds of each client burst and of the idle gap after it."""


class _NoWake(Ticker):
    """Planted bug: neither a suspect peer nor a lost connection wakes a quiesced group."""

    def wake_all(self, catch_up: int) -> None:
        del catch_up


class _QuiesceRecovering(Ticker):
    """Planted bug: a follower quiesces on its leader's word without asking whether it is still
    recovering from a restart."""

    def quiesce_follower(self, group: int, leader: int, term: int, commit: int) -> None:
        del commit
        g = self._groups.get(group)
        if g is None:
            return
        r = g.raw.raft
        if r.role is Role.FOLLOWER and r.lead == leader and r.term == term:
            g.quiesced = True  # the bug: recovery is not consulted


class _NoWakeHost(MultiRaft):
    ticker_class = _NoWake


class _QuiesceRecoveringHost(MultiRaft):
    ticker_class = _QuiesceRecovering


class QuiescentSim(RuntimeSim):
    """One seeded run with quiescence (`PlantedNoWake` and `PlantedQuiesceRecovering` plant
    a bug in the hosts' `Ticker`)."""

    quiesce = True

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self._stuck: dict[tuple[int, int], float] = {}
        self._stuck_recovering: dict[tuple[int, int], float] = {}

    @property
    def quiesces(self) -> int:
        """Groups that quiesced on their leaders, over every host of the run."""
        return sum(h.ticker.quiesces for h in self.hosts)

    @property
    def wakes(self) -> int:
        """Quiesced groups woken by a suspect or lost peer, over every host of the run."""
        return sum(h.ticker.wakes for h in self.hosts)

    def observe(self) -> None:
        super().observe()
        self.check_quiet()

    def _reachable(self, frm: int, to: int) -> bool:
        """Whether frames from ``frm`` reach ``to`` now (both up, linked, neither paused)."""
        net = self.net
        return (
            frm in self.nodes
            and self.nodes[frm].up
            and net.is_up(frm, to)
            and not net.is_paused(frm)
            and not net.is_paused(to)
        )

    def check_quiet(self) -> None:
        """No follower stays quiesced long under a leader it cannot hear from, or none."""
        now = self.loop.time()
        for n in self.nodes.values():
            for g, d in n.drivers.items():
                r = d.raw.raft
                lead = r.lead
                # No leader at all counts too: a follower told its leader is gone (silent or
                # disconnected) forgets it, and must be ticking to campaign.
                cut_off = lead == NONE or (
                    lead in self.nodes and lead != n.id and not self._reachable(lead, n.id)
                )
                key = (n.id, g)
                self._check_recovering(n.up, d.quiesced and r.role is Role.FOLLOWER, key, r)
                if not (n.up and d.quiesced and r.role is Role.FOLLOWER and cut_off):
                    self._stuck.pop(key, None)
                    continue
                since = self._stuck.setdefault(key, now)
                if now - since > (LIMIT + 10) * TICK:
                    self.violation(
                        f"group {g} on n{n.id} stayed quiesced {now - since:.2f} s under "
                        + (f"unreachable leader n{lead}" if lead != NONE else "no leader")
                    )
                    self._stuck[key] = now  # report once per episode

    def _check_recovering(self, up: bool, quiet: bool, key: tuple[int, int], r: Any) -> None:
        """A replica does not stay quiesced while recovering (it would stop asking)."""
        now = self.loop.time()
        if not (up and quiet and r.out_of_elections()):
            self._stuck_recovering.pop(key, None)
            return
        since = self._stuck_recovering.setdefault(key, now)
        # Never needed: a recovering replica declines quiescence, and nothing makes a quiesced
        # one recover without waking it; a few ticks cover a heartbeat in flight.
        if now - since > 5 * TICK:
            nid, g = key
            self.violation(
                f"group {g} on n{nid} stayed quiesced {now - since:.2f} s while recovering "
                "from a restart (out of elections)"
            )
            self._stuck_recovering[key] = now

    # -- clients in bursts --------------------------------------------------------------------
    async def workload(self, group: int, cid: int, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        burst = 0
        while not stop.is_set():
            burst += 1
            phase = asyncio.Event()
            handle = loop.call_later(BUSY, phase.set)
            relay = loop.create_task(_relay(stop, phase))
            try:
                # A client id per burst: every command proposed stays unique.
                await self.client(group, cid + 1000 * burst, phase)
            finally:
                handle.cancel()
                relay.cancel()
                await asyncio.gather(relay, return_exceptions=True)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(IDLE):
                    await stop.wait()


async def _relay(src: asyncio.Event, dst: asyncio.Event) -> None:
    await src.wait()
    dst.set()


class PlantedNoWake(QuiescentSim):
    """Planted bug: a suspect peer wakes no quiesced group."""

    host_class = _NoWakeHost


class PlantedQuiesceRecovering(QuiescentSim):
    """Planted bug: a replica still recovering from a restart accepts quiescence."""

    host_class = _QuiesceRecoveringHost


def main(argv: list[str] | None = None) -> int:
    """``python -m raftlog.sim.quiesce_sim --seeds N [--seed S] [--nodes 3|5] [--seconds T]
    [--plant-no-wake]``."""
    import logging

    ap = seeds_parser("python -m raftlog.sim.quiesce_sim", __doc__, groups=3)
    ap.add_argument("--plant-no-wake", action="store_true", help="plant the no-wake bug")
    ap.add_argument(
        "--plant-quiesce-recovering",
        action="store_true",
        help="plant the bug of a recovering replica that accepts quiescence",
    )
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)
    sim: type[QuiescentSim] = QuiescentSim
    if args.plant_no_wake:
        sim = PlantedNoWake
    elif args.plant_quiesce_recovering:
        sim = PlantedQuiesceRecovering
    return report_seeds("quiesce", seeds_of(args), seeds_config(args), sim)


if __name__ == "__main__":
    raise SystemExit(main())
