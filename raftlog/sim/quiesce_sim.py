"""The runtime simulation (`raftlog.sim.runtime_sim`) with quiescence and node liveness.

The production `GroupDriver` quiescence (`can_quiesce`, `quiesce_follower`, `wake`) and the
production `raftlog.runtime.liveness` (`PeerLiveness`, `quiesce_idle`) run on the virtual-time
loop; only the host around them is simulated like `MultiRaft`: every tick each live node sends
each peer a liveness signal over the simulated network (so cut, lost, delayed like any message),
skips its quiesced groups, wakes them all when a peer turns suspect, and sends the ``QUIESCE``
heartbeat of the groups going idle. A crashed node simply falls silent (no connection drop is
reported: the slower, conservative case). Clients work in bursts with idle gaps, so groups
quiesce and wake again all through the faults.

Checked, besides everything `RuntimeSim` checks: no follower stays quiesced more than
``LIMIT + 10`` ticks while its leader's node is down or the link from it is cut (a quiesced
group must not wait forever on a dead leader). ``planted="no-wake"`` (suspicion wakes nothing)
is a bug this check catches. ``python -m raftlog.sim.quiesce_sim --seeds N [--nodes 3|5]``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from raftlog.core import Message, MsgType, Role
from raftlog.runtime.liveness import PeerLiveness, Quiescing, quiesce_idle
from raftlog.sim.runtime_sim import TICK, RuntimeSim, RuntimeSimConfig, report_seeds

LIMIT = 10
"""Liveness limit in ticks (`RuntimeConfig.liveness_ticks`)."""
BUSY = 1.0
IDLE = 1.5
"""Seconds of each client burst and of the idle gap after it."""


class QuiescentSim(RuntimeSim):
    """One seeded run with quiescence. ``planted``: "" or "no-wake"."""

    planted = ""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.liveness = {i: PeerLiveness(LIMIT) for i in self.ids}
        self.quiesces = 0
        self.wakes = 0
        self._stuck: dict[tuple[int, int], float] = {}

    def start_node(self, nid: int) -> None:
        super().start_node(nid)
        self.liveness[nid] = PeerLiveness(LIMIT)  # a restarted process knows nothing yet

    # -- the host -----------------------------------------------------------------------------
    def _net(self, frm: int, to: int, fn: Callable[..., None], *args: Any) -> None:
        if (frm, to) in self.cut or self.rng.random() < self.loss:
            return
        delay = self.rng.uniform(0.0005, 0.01)
        if self.rng.random() < 0.01:
            delay += self.rng.uniform(0.05, 0.5)
        self.loop.call_later(delay, fn, frm, to, *args)

    def _heard(self, frm: int, to: int) -> None:
        if (frm, to) not in self.cut and self.nodes[to].up:
            self.liveness[to].heard(frm)

    def _quiet(self, frm: int, to: int, q: Quiescing) -> None:
        n = self.nodes[to]
        d = n.drivers.get(q.group)
        if (frm, to) in self.cut or not n.up or d is None:
            return
        d.step(Message(MsgType.HEARTBEAT, to=to, frm=frm, term=q.term, commit=q.commit))
        d.quiesce_follower(frm, q.term, q.commit)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            for n in self.nodes.values():
                if not n.up:
                    continue
                peers = [p for p in self.ids if p != n.id]
                for p in peers:
                    self._net(n.id, p, self._heard)
                catch_up = self.liveness[n.id].tick(peers)
                if catch_up and self.planted != "no-wake":
                    for d in n.drivers.values():
                        self.wakes += d.quiesced
                        d.wake(catch_up)
                for d in n.drivers.values():
                    if not d.quiesced:
                        d.tick()
                for q in quiesce_idle(n.drivers, n.id, self.liveness[n.id].is_live):
                    self.quiesces += 1
                    for p in q.followers:
                        self._net(n.id, p, self._quiet, q)
            self.observe()
            self.check_quiet()

    def check_quiet(self) -> None:
        """No follower stays quiesced long under a leader it cannot hear from."""
        now = self.loop.time()
        for n in self.nodes.values():
            for g, d in n.drivers.items():
                r = d.raw.raft
                lead = r.lead
                away = lead in self.nodes and (not self.nodes[lead].up or (lead, n.id) in self.cut)
                cut_off = lead != n.id and away
                key = (n.id, g)
                if not (n.up and d.quiesced and r.role is Role.FOLLOWER and cut_off):
                    self._stuck.pop(key, None)
                    continue
                since = self._stuck.setdefault(key, now)
                if now - since > (LIMIT + 10) * TICK:
                    self.violation(
                        f"group {g} on n{n.id} stayed quiesced {now - since:.2f} s under "
                        f"unreachable leader n{lead}"
                    )
                    self._stuck[key] = now  # report once per episode

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
                await asyncio.wait_for(stop.wait(), IDLE)


async def _relay(src: asyncio.Event, dst: asyncio.Event) -> None:
    await src.wait()
    dst.set()


class PlantedNoWake(QuiescentSim):
    """Planted bug: a suspect peer wakes no quiesced group."""

    planted = "no-wake"


def main(argv: list[str] | None = None) -> int:
    """``python -m raftlog.sim.quiesce_sim --seeds N [--seed S] [--nodes 3|5] [--seconds T]
    [--plant-no-wake]``."""
    import argparse
    import logging

    ap = argparse.ArgumentParser(prog="python -m raftlog.sim.quiesce_sim", description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0, help="virtual seconds of chaos")
    ap.add_argument("--plant-no-wake", action="store_true", help="plant the no-wake bug")
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)
    cfg = RuntimeSimConfig(nodes=args.nodes, groups=args.groups, seconds=args.seconds)
    sim = PlantedNoWake if args.plant_no_wake else QuiescentSim
    return report_seeds("quiesce", range(args.seed, args.seed + args.seeds), cfg, sim)


if __name__ == "__main__":
    raise SystemExit(main())
