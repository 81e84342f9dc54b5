"""The leader's side of replication: what to send each follower, how answers move its
progress, and when entries commit.

Rules (Raft paper section 3.5-3.6, etcd-io/raft's progress tracking): a follower in probe state
gets one append at a time until an answer shows where its log matches; in replicate state the
leader pipelines appends up to the inflight window (count and bytes) and refills it on every
acknowledgement; a follower behind the compacted log gets the snapshot. An index commits when a
majority of voters hold it *durably* (the leader's own entries count once `on_persisted` reports
them) and it belongs to the current term; earlier entries commit with it.

`LeaderReplication` is a mixin of `raftlog.core.raft.Raft`: it owns no state, and the
attributes declared below are `Raft`'s.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from raftlog.core.progress import Progress, ProgressState
from raftlog.core.quorum import committed_index
from raftlog.core.types import ConfState, Entry, Message, MsgType, Role
from raftlog.errors import Compacted, InvariantViolation

if TYPE_CHECKING:
    from raftlog.core.config import Config
    from raftlog.core.log import RaftLog


class LeaderReplication:
    """Replication and commit at the leader (a mixin of `Raft`; see the module docstring)."""

    id: int
    cfg: Config
    log: RaftLog
    term: int
    role: Role
    conf: ConfState
    progress: dict[int, Progress]
    uncommitted: deque[tuple[int, int]]
    uncommitted_bytes: int
    snapshot_elapsed: dict[int, int]
    lead_transferee: int

    def _send(self, m: Message) -> None:
        raise NotImplementedError

    def _send_timeout_now(self, to: int) -> None:
        raise NotImplementedError

    def on_persisted(self, index: int, term: int) -> None:
        """Entries up to ``index`` (of ``term``) are durable here: the leader's own match."""
        if self.role is not Role.LEADER or self.log.term(index) != term:
            return
        pr = self.progress.get(self.id)
        if pr is not None and pr.maybe_update(index) and self._maybe_commit():
            self._bcast_append()

    def _maybe_commit(self) -> bool:
        voters = self.conf.voters
        matches = [self.progress[v].match for v in voters if v in self.progress]
        index = committed_index(matches, len(voters), minority=self.cfg.unsafe.commit_on_minority)
        # Only entries of the current term commit by counting replicas (Raft section 5.4.2).
        if index > self.log.committed and self.log.term(index) == self.term:
            self.log.commit_to(index)
            while self.uncommitted and self.uncommitted[0][0] <= index:
                self.uncommitted_bytes -= self.uncommitted.popleft()[1]
            return True
        return False

    # -- replication -------------------------------------------------------------------------------
    def _bcast_append(self) -> None:
        for node in self.progress:
            if node != self.id:
                self._send_append(node)

    def _bcast_heartbeat(self) -> None:
        for node, pr in self.progress.items():
            if node != self.id:
                self._send(
                    Message(
                        MsgType.HEARTBEAT,
                        to=node,
                        frm=self.id,
                        term=self.term,
                        commit=min(pr.match, self.log.committed),
                    )
                )

    def _send_append(self, to: int, *, allow_empty: bool = True) -> bool:
        """Send the next append (or a snapshot) to ``to`` unless its progress is paused."""
        pr = self.progress[to]
        if pr.is_paused():
            return False
        prev = pr.next - 1
        prev_term = self.log.term(prev)
        entries: list[Entry] = []
        compacted = prev_term == 0 and prev != 0
        if not compacted:
            try:
                entries = self.log.entries_from(pr.next, self.cfg.max_msg_bytes)
            except Compacted:
                compacted = True
        if compacted:
            return self._send_snapshot(to, pr)
        if not entries and not allow_empty:
            return False
        size = sum(e.size() for e in entries)
        last = entries[-1].index if entries else prev
        pr.sent_entries(last, len(entries), size)
        self._send(
            Message(
                MsgType.APP,
                to=to,
                frm=self.id,
                term=self.term,
                index=prev,
                log_term=prev_term,
                entries=tuple(entries),
                commit=self.log.committed,
                epoch=pr.epoch,
            )
        )
        return True

    def _send_snapshot(self, to: int, pr: Progress) -> bool:
        if not pr.recent_active:
            return False  # do not ship a snapshot to a peer that may be down
        snap = self.log.storage.snapshot()
        if snap.meta.index == 0:
            raise InvariantViolation("log is compacted but storage has no snapshot")
        pr.become_snapshot(snap.meta.index)
        self.snapshot_elapsed[to] = 0
        self._send(
            Message(MsgType.SNAP, to=to, frm=self.id, term=self.term, snapshot=snap, epoch=pr.epoch)
        )
        return True

    def _step_leader(self, m: Message) -> None:
        pr = self.progress.get(m.frm)
        if pr is None:
            return
        if m.type is MsgType.APP_RESP:
            if m.epoch != pr.epoch:
                return  # an answer to an earlier record of this node (see `Message.epoch`)
            pr.recent_active = True
            if m.reject:
                self._handle_reject(m, pr)
            else:
                self._handle_ack(m, pr)
        elif m.type is MsgType.LOG_LOST:
            # The follower lost entries we counted as matched: probe it from its real end.
            # Nothing it holds is known to match any more (a disk restored from an older copy
            # may end in entries since overwritten here), so its match drops to 0 until an
            # append is acknowledged again; the commit index never moves back.
            pr.recent_active = True
            if pr.match > 0 or pr.state is not ProgressState.PROBE:
                pr.match = 0
                pr.become_probe()
                pr.next = max(1, min(m.index, self.log.last_index()) + 1)
                self._send_append(m.frm)
        elif m.type is MsgType.HEARTBEAT_RESP:
            pr.recent_active = True
            pr.msg_app_probe_paused = False
            if pr.state is ProgressState.REPLICATE and pr.inflights.full():
                pr.inflights.free_first_one()
            if pr.match < self.log.last_index():
                self._send_append(m.frm)

    def _handle_reject(self, m: Message, pr: Progress) -> None:
        next_probe = m.reject_hint
        if m.log_term > 0:
            # Skip every entry of ours whose term is above the follower's hint term.
            next_probe, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
        if pr.maybe_decr_to(m.index, next_probe):
            if pr.state is ProgressState.REPLICATE:
                pr.become_probe()
            self._send_append(m.frm)

    def _handle_ack(self, m: Message, pr: Progress) -> None:
        was_paused = pr.is_paused()
        if pr.maybe_update(m.index):
            if self.cfg.unsafe.lazy_pipeline:
                pr.become_probe()
                self._maybe_commit()
                return
            if pr.state is ProgressState.PROBE:
                pr.become_replicate()
            elif pr.state is ProgressState.SNAPSHOT and pr.match + 1 >= self.log.first_index():
                self.snapshot_elapsed.pop(m.frm, None)
                pr.become_replicate()
            elif pr.state is ProgressState.REPLICATE:
                pr.inflights.free_le(m.index)
            if self._maybe_commit():
                self._bcast_append()
            elif was_paused:
                # The follower may not know the commit index yet: an (empty) append tells it.
                self._send_append(m.frm)
            # Keep the pipe full: send whatever the window now admits.
            while self._send_append(m.frm, allow_empty=False):
                pass
            if m.frm == self.lead_transferee and pr.match == self.log.last_index():
                self._send_timeout_now(m.frm)
