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
group must not wait forever on a dead leader); and no replica stays quiesced more than a few
ticks while it is still recovering from a restart (`raftlog.core.recovery`: a quiesced
replica stops asking its peers, so it would stay out of elections, and the loss of any other
node would then leave the group without a quorum). Planted bugs these checks catch:
``planted="no-wake"`` (suspicion wakes nothing) and ``planted="quiesce-recovering"`` (a
recovering replica accepts quiescence).
``python -m raftlog.sim.quiesce_sim --seeds N [--nodes 3|5]``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
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
    """One seeded run with quiescence. ``planted``: "", "no-wake" or "quiesce-recovering"."""

    planted = ""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.liveness = {i: PeerLiveness(LIMIT) for i in self.ids}
        self.quiesces = 0
        self.wakes = 0
        self._stuck: dict[tuple[int, int], float] = {}
        self._stuck_recovering: dict[tuple[int, int], float] = {}
        self._connecting: dict[tuple[int, int], float] = {}
        """(from, to) → when the restarted ``from``'s connection to ``to`` is up."""

    def start_node(self, nid: int) -> None:
        super().start_node(nid)
        self.liveness[nid] = PeerLiveness(LIMIT)  # a restarted process knows nothing yet
        # Its connections come up one by one after handshakes, and a peer's redial runs on its
        # own backoff (up to seconds); until a link is up the transport drops what it carries
        # (so a restarted replica's first recovery asks or their answers can be lost).
        now = self.loop.time()
        for p in self.ids:
            if p != nid:
                self._connecting[nid, p] = now + self.rng.uniform(0.0, 0.3)
                self._connecting[p, nid] = now + self.rng.uniform(0.0, 2.0)

    def send(self, frm: int, group: int, msgs: Sequence[Message]) -> None:
        up = [m for m in msgs if self._connecting.get((frm, m.to), 0.0) <= self.loop.time()]
        self.result.dropped += len(msgs) - len(up)
        super().send(frm, group, up)

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
        if self.planted == "quiesce-recovering":
            r = d.raw.raft
            if r.role is Role.FOLLOWER and r.lead == frm and r.term == q.term:
                d.quiesced = True  # the bug: recovery is not consulted
            return
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
                self._check_recovering(n.up, d.quiesced and r.role is Role.FOLLOWER, key, r)

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
                await asyncio.wait_for(stop.wait(), IDLE)


async def _relay(src: asyncio.Event, dst: asyncio.Event) -> None:
    await src.wait()
    dst.set()


class PlantedNoWake(QuiescentSim):
    """Planted bug: a suspect peer wakes no quiesced group."""

    planted = "no-wake"


class PlantedQuiesceRecovering(QuiescentSim):
    """Planted bug: a replica still recovering from a restart accepts quiescence."""

    planted = "quiesce-recovering"


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
    ap.add_argument(
        "--plant-quiesce-recovering",
        action="store_true",
        help="plant the bug of a recovering replica that accepts quiescence",
    )
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)
    cfg = RuntimeSimConfig(nodes=args.nodes, groups=args.groups, seconds=args.seconds)
    sim: type[QuiescentSim] = QuiescentSim
    if args.plant_no_wake:
        sim = PlantedNoWake
    elif args.plant_quiesce_recovering:
        sim = PlantedQuiesceRecovering
    return report_seeds("quiesce", range(args.seed, args.seed + args.seeds), cfg, sim)


if __name__ == "__main__":
    raise SystemExit(main())
