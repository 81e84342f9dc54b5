"""`GroupDriver`: runs one group's Ready contract on the event loop.

One driver task per group. Inputs (`step`, `tick`, `propose`) are handled synchronously by the
caller; whatever they produce that may leave at once (a leader's appends) is sent immediately, so
replication overlaps the leader's own disk write. The driver task carries out each Ready in
order: send → persist (awaiting the WAL's group commit) → send what needed durability → apply →
advance. Proposals that arrive while it is busy are packed into one entry.

Every proposal future resolves: with the state machine's result, or with a retriable error
(`NotLeader`, `Overloaded`, `ProposalDropped`) on leadership loss, group stop or shutdown.

Its parts, one idea each: `raftlog.runtime.proposals` (the queue of proposals and the waiters
of their entries), `raftlog.runtime.snapshots` (when to snapshot, how much log to keep),
`raftlog.runtime.shipping` (outgoing messages, snapshots exported for a follower on the way).
This module is the Ready contract that ties them together, and the group's quiescence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence

from raftlog.core import (
    ConfChange,
    Entry,
    EntryKind,
    Message,
    MsgType,
    RawNode,
    Ready,
    Role,
    Status,
)
from raftlog.core.progress import ProgressState
from raftlog.errors import (
    InvariantViolation,
    NotLeader,
    ProposalDropped,
    RaftError,
)
from raftlog.runtime.group_options import (
    DurableLog,
    GroupCounters,
    GroupOptions,
    Offload,
    Sender,
)
from raftlog.runtime.proposals import Proposals
from raftlog.runtime.shipping import SnapshotShipping
from raftlog.runtime.snapshots import SnapshotPolicy
from raftlog.runtime.statemachine import AfterApply, StateMachine, decode_batch

log = logging.getLogger("raftlog.runtime")


class GroupDriver:
    """One group on this node. Created and owned by `MultiRaft`."""

    def __init__(
        self,
        group: int,
        raw: RawNode,
        store: DurableLog,
        sm: StateMachine,
        *,
        send: Sender,
        options: GroupOptions,
        offload: Offload = asyncio.to_thread,
        on_halt: Callable[[int, BaseException], None] | None = None,
    ) -> None:
        """``on_halt`` is told when the driver halts on an error (after it has stopped)."""
        self.group = group
        self._on_halt = on_halt
        self.raw = raw
        self.store = store
        self.sm = sm
        self.options = options
        self._offload = offload
        self.counters = GroupCounters()
        self._proposals = Proposals(group, options, self.counters)
        self._snapshots = SnapshotPolicy(options, store.snapshot().meta.index)
        self._shipping = SnapshotShipping(
            group,
            sm,
            send,
            offload=offload,
            options=options,
            report=self.report_snapshot,
            live=lambda: self.stopped is None,
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.stopped: BaseException | None = None
        self._was_leader = False
        self._term = raw.raft.term
        self._after_apply = sm.after_apply if isinstance(sm, AfterApply) else None
        self.reset_by_repair = False
        """This replica was opened empty by a repair (`raftlog.runtime.repair`): the entries it
        lost with its damaged copy are expected to be missing until it has caught up."""
        self._quiesced = False
        self.on_wake: Callable[[GroupDriver], None] | None = None
        """Told whenever this group stops being quiesced (the host's tick loop walks only the
        groups that are awake, `raftlog.runtime.ticks.Ticker.track`)."""

    @property
    def quiesced(self) -> bool:
        """An idle group the host does not tick (see `can_quiesce`, `quiesce_follower`, `wake`):
        its leader sends no heartbeats and its followers run no election timer. Any input but a
        heartbeat answer wakes it; the host wakes it when a peer goes silent. Every change from
        quiesced to awake, whoever makes it, is reported to `on_wake`."""
        return self._quiesced

    @quiesced.setter
    def quiesced(self, value: bool) -> None:
        was, self._quiesced = self._quiesced, value
        if was and not value and self.on_wake is not None:
            self.on_wake(self)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        """Restore the state machine from the latest snapshot and start the driver task."""
        snap = self.store.snapshot()
        self.sm.restore(snap.meta.index, snap.data)
        self._applied()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"raft-group-{self.group}"
        )

    async def stop(self, reason: str = "group stopped") -> None:
        """Cancel the driver and fail every waiter. Idempotent."""
        if self.stopped is None:
            self.stopped = ProposalDropped(reason)
        await self._shipping.stop()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._proposals.fail_all(ProposalDropped(reason))

    def halt(self, exc: BaseException) -> None:
        """Stop this group for good because of ``exc`` (e.g. its data directory failed:
        `raftlog.errors.DiskFailed`): it leads, votes and answers nothing from now on, and every
        waiter fails. Idempotent (the first reason stays)."""
        if self.stopped is None:
            self._halt(exc)

    def _halt(self, exc: BaseException) -> None:
        """A broken invariant or storage failure: stop this group loudly (never swallow)."""
        log.error(
            "group %d stopped: %s",
            self.group,
            exc,
            exc_info=exc,
            extra={"event": "group_halted", "group": self.group},
        )
        self.stopped = exc
        self._proposals.fail_all(ProposalDropped(f"group {self.group} stopped: {exc}"))
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        if self._on_halt is not None:
            self._on_halt(self.group, exc)

    # -- inputs ------------------------------------------------------------------------------------
    def step(self, m: Message) -> None:
        if self.stopped is not None:
            return
        if self.quiesced and m.type is not MsgType.HEARTBEAT_RESP:
            self.quiesced = False
        lost = self.raw.raft.lost_acknowledged
        try:
            self.raw.step(m)
        except RaftError as exc:
            self._halt(exc)
            return
        if self.raw.raft.lost_acknowledged != lost:
            log.error(
                "group %d: this node lacks entries it acknowledged (the leader's commit index "
                "%d is beyond its log, which ends at %d): its disk was wiped, restored from an "
                "older copy, or did not keep what it fsynced; it votes again once it holds them",
                self.group,
                m.commit,
                self.raw.raft.log.last_index(),
                extra={"event": "acknowledged_entries_lost", "group": self.group},
            )
        self._after_input()
        self._note_step_down()

    def _note_step_down(self) -> None:
        """Fail the waiting proposals as soon as this replica stops leading (outcome unknown),
        not only once the driver handles the next Ready: the driver may be waiting on a slow
        or hung disk for as long as the disk takes (`cmq.node.diskwatch` hands leadership
        away then), and the callers should learn at once that this leader is gone."""
        if self._was_leader and self.raw.raft.role is not Role.LEADER:
            self._was_leader = False
            self._proposals.fail_all(
                NotLeader(
                    self.raw.raft.lead, "leadership lost; outcome unknown", outcome_unknown=True
                )
            )

    def tick(self) -> None:
        if self.stopped is not None:
            return
        try:
            self.raw.tick()
        except RaftError as exc:
            self._halt(exc)
            return
        self._after_input()
        self._note_step_down()

    # -- quiescence --------------------------------------------------------------------------------
    def can_quiesce(self) -> bool:
        """True when this replica leads the group and nothing is in flight: no proposal queued
        or awaiting its result, no transfer, everything committed and applied here, and every
        other replica (voter or learner) durably matches the whole log in the replicate state.
        The host may then send each follower one last heartbeat (it carries the commit index,
        so they learn it) and stop ticking the group."""
        r = self.raw.raft
        if (
            self.stopped is not None
            or r.role is not Role.LEADER
            or self._proposals.queued
            or self._proposals.waiting
            or r.lead_transferee
        ):
            return False
        last = r.log.last_index()
        if r.log.committed != last or r.log.applied != last or self.raw.has_ready():
            return False
        for node, pr in r.progress.items():
            if node != r.id and (pr.match != last or pr.state is not ProgressState.REPLICATE):
                return False
        return True

    def quiesce_follower(self, leader: int, term: int, commit: int) -> bool:
        """A quiescing heartbeat from ``leader`` (already stepped like a heartbeat): stop
        ticking when this replica follows that leader in that term and holds its whole committed
        log. Returns whether the group is now quiesced.

        A replica still recovering from a restart (`raftlog.core.recovery`: it has not heard
        from enough peers yet, or it lost entries it acknowledged) declines and keeps ticking,
        so it keeps asking its peers: its first asks may have been lost while connections came
        up, and a quiesced replica asks nothing, so it would stay out of elections until
        the group happened to wake, and a later loss of the leader would find no quorum."""
        r = self.raw.raft
        if (
            self.stopped is None
            and r.role is Role.FOLLOWER
            and r.lead == leader
            and r.term == term
            and r.log.committed >= commit
            and not (r.recovering or r.refreshing or r.rejoining)
        ):
            self.quiesced = True
        return self.quiesced

    def wake(self, catch_up: int = 0) -> None:
        """Tick this group again. A follower woken because its leader went silent first
        catches up ``catch_up`` ticks (the time it has not heard from it), so the election
        timeout runs from the last contact, as if it had never stopped ticking."""
        if not self.quiesced:
            return
        self.quiesced = False
        if self.raw.raft.role is not Role.LEADER:
            for _ in range(catch_up):
                self.tick()

    def report_unreachable(self, peer: int) -> None:
        if self.stopped is None:
            self.raw.report_unreachable(peer)

    def report_peer_down(self, peer: int) -> None:
        """``peer``'s connection dropped (`RawNode.report_peer_down`)."""
        if self.stopped is None:
            self.raw.report_peer_down(peer)

    def report_snapshot(self, peer: int, ok: bool) -> None:
        if self.stopped is None:
            self.raw.report_snapshot(peer, ok)

    def propose(self, command: bytes) -> asyncio.Future[object]:
        """Queue ``command`` for the next entry; the future resolves once it is applied here.

        Fails fast (raises) when this node is not the leader or the queue is full.
        """
        if self.stopped is not None:
            raise ProposalDropped(f"group {self.group} is stopped", outcome_unknown=False)
        if not command:
            raise ValueError("a proposal must not be empty")
        self.quiesced = False
        r = self.raw.raft
        if r.role is not Role.LEADER:
            raise NotLeader(r.lead)
        if r.lead_transferee:
            raise NotLeader(r.lead_transferee, "leadership transfer in progress")
        fut = self._proposals.add(command)
        self._wake.set()
        return fut

    def propose_conf_change(self, cc: ConfChange) -> asyncio.Future[object]:
        """Propose a membership step; resolves (to None) once it is applied here."""
        if self.stopped is not None:
            raise ProposalDropped(f"group {self.group} is stopped", outcome_unknown=False)
        self.quiesced = False
        index = self.raw.propose_conf_change(cc)
        fut = self._proposals.await_entry(index, self.raw.raft.term)
        self._after_input()
        return fut

    def transfer_leader(self, to: int) -> None:
        self.quiesced = False
        self.raw.transfer_leader(to)
        self._after_input()

    def status(self) -> Status:
        return self.raw.status()

    def leader(self) -> int:
        """The leader this replica knows of (0: none, and always 0 once the group stopped),
        without building a `Status`."""
        return self.raw.raft.lead if self.stopped is None else 0

    def recovering(self) -> bool:
        """Still out of elections (`raftlog.core.recovery.RecoveryGuard.out_of_elections`)."""
        return self.raw.raft.out_of_elections()

    def hand_over(self, avoid: Collection[int] = ()) -> int:
        """A leader asks its best other voter to take over: the recently active, non-learner
        voter (not in ``avoid``) that matches most of the log. Returns the node asked, or 0
        when this replica does not lead, a transfer is already under way, or nobody fits.
        `raftlog.errors.RaftError` from the core passes through (the transfer was refused)."""
        r = self.raw.raft
        if self.stopped is not None or r.role is not Role.LEADER or r.lead_transferee:
            return 0
        st = self.status()
        targets = [
            (ps.match, p)
            for p, ps in st.peers.items()
            if p != r.id
            and p in st.conf.voters
            and p not in avoid
            and ps.recent_active
            and not ps.learner
        ]
        if not targets:
            return 0
        best = max(targets)[1]
        self.transfer_leader(best)
        return best

    def nudge(self, peers: Sequence[int]) -> None:
        """Ask ``peers`` for their term and log position (`MsgType.RECOVER`, which every node
        answers and which changes no one's term): a replica that lost its state and waits to
        be caught up thereby wakes a leader that went quiet (any input wakes a quiesced group),
        whose next heartbeat starts the catch-up. Answers are ignored unless recovering."""
        r = self.raw.raft
        if self.stopped is None:
            self._shipping.send(
                [Message(MsgType.RECOVER, to=p, frm=r.id, term=r.term) for p in peers if p != r.id]
            )

    def request_snapshot(self) -> None:
        """Snapshot at the next opportunity (this group pins old WAL segments)."""
        if self._snapshots.request(self.raw.raft.log.applied):
            self._wake.set()

    # -- the driver --------------------------------------------------------------------------------
    def _after_input(self) -> None:
        msgs = self.raw.take_messages()
        if msgs:
            self._shipping.send(msgs)
        if self.raw.has_ready() or self._proposals.queued:
            self._wake.set()

    async def _run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                self._flush_proposals()
                while self.raw.has_ready():
                    await self._handle_ready(self.raw.ready())
                    self._flush_proposals()
                if self._snapshots.take_request(self.raw.raft.log.applied):
                    self.counters.forced_snapshots += 1
                    await self._take_snapshot()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A storage failure, a broken invariant, or the state machine's own error (damage
            # it found in its files): never a driver task that dies unnoticed.
            self._halt(exc)

    def _flush_proposals(self) -> None:
        """Pack every queued proposal into entries and propose them."""
        self._proposals.pack(self.raw.propose, self.raw.raft.term)
        msgs = self.raw.take_messages()
        if msgs:
            self._shipping.send(msgs)

    async def _handle_ready(self, rd: Ready) -> None:
        self.counters.readies += 1
        if rd.messages:
            self._shipping.send(rd.messages)
        if rd.snapshot is not None:
            # Writing the snapshot's data file blocks: keep it off the event loop.
            fut = await self._offload(
                self.store.submit_ready,
                snapshot=rd.snapshot,
                entries=rd.entries,
                hard_state=rd.hard_state,
                sync=rd.must_sync,
            )
            await asyncio.wrap_future(fut)
            self.counters.persisted_entries += len(rd.entries)
            if rd.persisted_messages:
                self._shipping.send(rd.persisted_messages)
            self.sm.restore(rd.snapshot.meta.index, rd.snapshot.data)
            self._applied()
            self._snapshots.installed(rd.snapshot.meta.index)
            self._proposals.fail_through(
                rd.snapshot.meta.index, ProposalDropped("replaced by a snapshot")
            )
            self._apply_all(rd.committed)
        else:
            # ``rd.committed`` holds only entries already durable here (and committed on a
            # quorum), never this Ready's new ones: apply them while the WAL writes and fsyncs
            # the new entries on its thread, so results do not wait for an unrelated fsync.
            # Not a membership change: its waiter must resume only once `advance` has put the
            # new configuration into effect in the core.
            if rd.committed and rd.entries and rd.committed[-1].index >= rd.entries[0].index:
                raise InvariantViolation(
                    f"group {self.group}: entry {rd.entries[0].index} is to be applied before "
                    "it is durable"
                )
            early = not any(e.kind is EntryKind.CONF for e in rd.committed)
            fut = None
            if rd.entries or rd.hard_state is not None:
                fut = self.store.submit_ready(
                    entries=rd.entries, hard_state=rd.hard_state, sync=rd.must_sync
                )
            if early:
                self._apply_all(rd.committed)
            if fut is not None:
                await asyncio.wrap_future(fut)
                self.counters.persisted_entries += len(rd.entries)
            if rd.persisted_messages:
                self._shipping.send(rd.persisted_messages)
            if not early:
                self._apply_all(rd.committed)
        self.raw.advance(rd)
        self.counters.applied_entries += len(rd.committed)
        if rd.soft_state is not None:
            is_leader = rd.soft_state.role is Role.LEADER
            if self._was_leader and not is_leader:
                hint = rd.soft_state.leader
                self._proposals.fail_all(
                    NotLeader(hint, "leadership lost; outcome unknown", outcome_unknown=True)
                )
            self._was_leader = is_leader
        term = self.raw.raft.term
        if term != self._term:
            # Lost and regained leadership between two Readies: entries proposed in the
            # earlier term may have been replaced, so their outcome is unknown.
            self._term = term
            self._proposals.fail_before(
                term, ProposalDropped("leadership changed; outcome unknown")
            )
        msgs = self.raw.take_messages()
        if msgs:
            self._shipping.send(msgs)
        if self._snapshots.due(self.raw.raft.log.applied):
            await self._take_snapshot()

    def _apply_all(self, entries: Sequence[Entry]) -> None:
        """Apply ``entries`` in order, then run the state machine's `AfterApply` hook."""
        if not entries:
            return
        for e in entries:
            self._apply(e)
        self._applied()

    def _applied(self) -> None:
        if self._after_apply is not None:
            self._after_apply()

    def _apply(self, e: Entry) -> None:
        self._snapshots.note_applied(e.index, len(e.data))
        if e.kind is EntryKind.CONF:
            results: list[object] = [None]
        elif not e.data:
            results = []  # a leader's no-op
        else:
            where = f"group {self.group} entry {e.index}"
            results = [self.sm.apply(e.index, cmd) for cmd in decode_batch(e.data, where)]
        self._proposals.applied(e.index, e.term, results)

    async def _take_snapshot(self) -> None:
        r = self.raw.raft
        index = r.log.applied
        # Off the event loop: a state machine's snapshot may fsync files. Safe because apply()
        # only runs in this driver, which waits here (see StateMachine.snapshot).
        data = await self._offload(self.sm.snapshot)
        _, fut = await self._offload(self.store.submit_create_snapshot, index, r.conf, data)
        await asyncio.wrap_future(fut)
        self.counters.snapshots += 1
        keep_from = self._snapshots.taken(index)
        if keep_from > self.store.first_index():
            self.store.compact(keep_from)
