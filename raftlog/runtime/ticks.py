"""`Ticker`: the node's tick loop, node liveness and quiescence (`raftlog.runtime.liveness`).

Every ``tick_interval`` seconds of the event loop's clock (one task, owned here) a tick:

1. every ``beat_every_ticks`` ticks sends every peer an empty ``BEATS`` frame (node
   liveness); every tick advances `PeerLiveness`; a
   peer that just turned suspect wakes every quiesced group (`wake_all`: followers first catch
   up the ticks they missed, so an election starts one election timeout after the leader was
   last heard), and the followers it led campaign within a few ticks (`report_peer_down`);
2. ticks every group that is not quiesced;
3. quiesces the idle groups led here whose other replicas are all on live, connected nodes
   (``RuntimeConfig.quiesce``), queueing their last heartbeats (``QUIESCE`` frames);
4. now and then: probes the peers' clocks, asks the groups that pin old WAL segments to
   snapshot, asks every group for its periodic snapshot.

A tick costs nothing per quiesced group: the loop walks only the groups that are awake. Each
group is `track`-ed when the host opens it; a tracked group reports every wake-up itself
(`GroupDriver.on_wake`: a proposal, a message from a peer, a transfer, `wake_all`), so it is
back on the walk at the next tick, and the walk drops the groups it finds quiesced, stopped or
no longer the host's.

A loop that fell far behind (a paused process) skips the ticks it missed instead of bursting
them. A follower stops ticking when its leader's ``QUIESCE`` heartbeat says so
(`quiesce_follower`), and a lost connection makes its peer suspect at once (`peer_down`).

`quiesces` and `wakes` count what quiescence did; a simulator plants bugs in a subclass
(`MultiRaft.ticker_class`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence

from raftlog.errors import RaftError
from raftlog.runtime.config import RuntimeConfig
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.host import LogDisk, PeerTransport
from raftlog.runtime.liveness import PeerLiveness, quiesce_idle
from raftlog.runtime.outbox import Outbox
from raftlog.runtime.peerwatch import PeerWatch
from raftlog.transport.codec import FrameKind, encode_beats

_NO_BEATS = encode_beats([])
"""An empty ``BEATS`` body: the per-tick liveness frame to every peer."""


class Ticker:
    """The tick loop of one node (see the module docstring)."""

    def __init__(
        self,
        cfg: RuntimeConfig,
        groups: Mapping[int, GroupDriver],
        *,
        transport: PeerTransport,
        outbox: Outbox,
        watch: PeerWatch,
        disks: Sequence[LogDisk],
    ) -> None:
        """``groups`` and ``disks`` are the host's (read at every tick)."""
        self.cfg = cfg
        self.me = cfg.node_id
        self._groups = groups
        self._transport = transport
        self._outbox = outbox
        self._watch = watch
        self._disks = disks
        if not 1 <= cfg.beat_every_ticks <= cfg.liveness_ticks // 4:
            raise ValueError(
                f"beat_every_ticks ({cfg.beat_every_ticks}) must be 1..liveness_ticks/4 "
                f"({cfg.liveness_ticks // 4})"
            )
        self.liveness = PeerLiveness(cfg.liveness_ticks)
        self._awake: dict[int, GroupDriver] = {}
        """The groups the tick walk visits: every tracked group not found quiesced since it last
        woke (a superset of the awake groups; the walk prunes it)."""
        for g in groups.values():
            self.track(g)
        self.task: asyncio.Task[None] | None = None
        """The tick loop (None: not started, or stopped)."""
        self.ticks = 0
        self.quiesces = 0
        """Groups led here that quiesced."""
        self.wakes = 0
        """Quiesced groups woken because a peer turned suspect or its connection dropped."""

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="ticks")

    async def stop(self) -> None:
        """Cancel the tick loop and wait for it."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.cfg.tick_interval
        next_at = loop.time()
        while True:
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() - next_at > interval * 5:
                next_at = loop.time()  # we fell far behind (paused process): do not burst ticks
            self.tick()

    def track(self, g: GroupDriver) -> None:
        """``g`` was just opened here (and put in the host's groups): tick it from the next
        tick on, and again whenever it wakes after quiescing."""
        g.on_wake = self._woke
        self._woke(g)

    def _woke(self, g: GroupDriver) -> None:
        self._awake[g.group] = g

    @property
    def awake(self) -> int:
        """How many groups the last tick walked (quiesced ones are not walked)."""
        return len(self._awake)

    def tick(self) -> None:
        """One tick (see the module docstring)."""
        cfg = self.cfg
        self._outbox.new_tick()
        self._check_liveness()
        groups = self._groups
        for gid, g in list(self._awake.items()):
            if g.quiesced or g.stopped is not None or groups.get(gid) is not g:
                if self._awake.get(gid) is g:
                    del self._awake[gid]
                continue
            g.tick()
        if cfg.quiesce:
            self._quiesce_idle()
        self.ticks += 1
        if self.ticks % cfg.clock_probe_ticks == 0:
            peers = [p for p in self._transport.peers if p != self.me]
            self._watch.probe(self._transport.send, peers)
        if self.ticks % cfg.pin_check_ticks == 0:
            self._snapshot_pinning_groups()
        if self.ticks % cfg.snapshot_every_ticks == 0:
            for g in list(self._groups.values()):
                g.request_snapshot()

    # -- liveness --------------------------------------------------------------------------------
    def heard(self, peer: int) -> None:
        """A frame from ``peer`` arrived: it is live."""
        self.liveness.heard(peer)

    def peer_down(self, peer: int) -> None:
        """The connection to ``peer`` dropped: it is suspect at once; every group wakes and
        treats it as unreachable, and a follower it led campaigns within a few ticks instead
        of waiting out its election timeout (`raftlog.core.election.Elections.report_peer_down`)."""
        self.wake_all(self.liveness.down(peer))
        self._report_down(peer, unreachable=True)

    def _report_down(self, peer: int, *, unreachable: bool) -> None:
        """Tell every group ``peer`` is gone: the followers it led campaign promptly, and with
        ``unreachable`` its leaders stop pipelining to it."""
        for g in list(self._groups.values()):
            with contextlib.suppress(RaftError):
                if unreachable:
                    g.report_unreachable(peer)
                g.report_peer_down(peer)

    def _check_liveness(self) -> None:
        """Send every peer its liveness frame when one is due; peers newly silent wake every
        group."""
        if self.ticks % self.cfg.beat_every_ticks == 0:
            for peer in self._transport.peers:
                self._transport.send(peer, FrameKind.BEATS, _NO_BEATS)
        newly = self.liveness.tick(self._transport.peers)
        if newly:
            self.wake_all(max(newly.values()))
            # Silent as long as a leader lease: as good as gone for the groups it leads (a
            # live leader is safe, its other followers are in its lease and refuse pre-votes).
            for peer in sorted(newly):
                self._report_down(peer, unreachable=False)

    def wake_all(self, catch_up: int) -> None:
        """Wake every quiesced group; followers first catch up ``catch_up`` ticks."""
        for g in list(self._groups.values()):
            self.wakes += g.quiesced
            g.wake(catch_up)

    # -- quiescence ------------------------------------------------------------------------------
    def _quiesce_idle(self) -> None:
        def live(p: int) -> bool:
            return self.liveness.is_live(p) and self._transport.is_connected(p)

        for q in quiesce_idle(self._awake, self.me, live):
            self.quiesces += 1
            self._outbox.quiesce(q.group, q.term, q.commit, q.followers)

    def quiesce_follower(self, group: int, leader: int, term: int, commit: int) -> None:
        """``leader``'s last heartbeat for ``group`` before it quiesces (already stepped like a
        heartbeat): the replica here stops ticking if it may (`GroupDriver.quiesce_follower`)."""
        g = self._groups.get(group)
        if g is not None:
            g.quiesce_follower(leader, term, commit)

    # -- snapshots -------------------------------------------------------------------------------
    def _snapshot_pinning_groups(self) -> None:
        """Ask groups that keep old WAL segments alive to snapshot, so the segments can go."""
        for disk in self._disks:
            if len(disk.segments()) <= self.cfg.max_wal_segments:
                continue
            for gid in disk.pinning_groups():
                g = self._groups.get(gid)
                if g is not None:
                    g.request_snapshot()
