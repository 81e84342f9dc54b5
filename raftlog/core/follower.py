"""The follower's side of replication: taking a leader's appends and snapshots, answering them,
and rejoining after lost entries.

Rules (Raft paper section 3.5; etcd-io/raft's conventions): an append whose previous entry
matches is taken (a conflicting suffix truncated, never a matching or committed entry) and
answered with the last index it proves to match; one that does not match is refused with a
hint (the last index whose term is at most the leader's previous term, and that term) so the
leader skips back a term at a time; an append below the commit index is answered with the
commit index. A snapshot beyond the commit index replaces the log, unless the log already holds
its last entry (then only the commit index moves). Every answer echoes the append's epoch. A
replica rejoining after data loss learns from the first commit index a leader shows it what it
must hold before it votes again (`maybe_finish_rejoin`).

`FollowerReplication` is a mixin of `raftlog.core.raft.Raft`, first in its bases (its
`_log_lost` is the one `raftlog.core.recovery.RecoveryGuard` declares): it owns no state, and
the attributes declared below are `Raft`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.core.types import ConfState, Message, MsgType, Snapshot
from raftlog.errors import InvariantViolation

if TYPE_CHECKING:
    from raftlog.core.log import RaftLog


class FollowerReplication:
    """Appends and snapshots at a follower (a mixin of `Raft`; see the module docstring)."""

    id: int
    log: RaftLog
    term: int
    conf: ConfState
    rejoining: bool
    rejoin_target: int | None
    verified: int

    def _send(self, m: Message) -> None:
        raise NotImplementedError

    def _log_lost(self, leader: int, commit: int) -> None:
        """Rejoining: the leader believes we hold entries up to ``commit`` at least."""
        if self.rejoin_target is None:
            self.rejoin_target = commit
        self._send(
            Message(
                MsgType.LOG_LOST,
                to=leader,
                frm=self.id,
                term=self.term,
                index=self.log.last_index(),
            )
        )

    def maybe_finish_rejoin(self) -> None:
        """Vote again once the durable log reaches the commit index learned while rejoining."""
        target = self.rejoin_target
        if self.rejoining and target is not None and self.log.stable_last() >= target:
            self.rejoining = False
            self.rejoin_target = None

    def _handle_append(self, m: Message) -> None:
        if self.rejoining and self.rejoin_target is None:
            # The first commit index heard from a leader is what this node must hold before it
            # votes again: everything it may have acknowledged before losing its disk is in
            # there. (A fixed target: chasing the moving commit index might never end.)
            self.rejoin_target = m.commit
        if m.index < self.log.committed:
            # Everything up to our commit index is known to match: say so.
            self._answer_append(m, self.log.committed)
            return
        last = self.log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if last is not None:
            self.verified = max(self.verified, last)
            self._answer_append(m, last)
            return
        hint_index, hint_term = self.log.find_conflict_by_term(m.index, m.log_term)
        self._answer_append(m, m.index, reject=True, reject_hint=hint_index, log_term=hint_term)

    def _answer_append(
        self,
        m: Message,
        index: int,
        *,
        reject: bool = False,
        reject_hint: int = 0,
        log_term: int = 0,
    ) -> None:
        """Answer the leader's ``APP`` or ``SNAP`` ``m`` (an ``APP_RESP`` echoing its epoch):
        this node matches up to ``index``, or with ``reject`` refuses the entries after it."""
        self._send(
            Message(
                MsgType.APP_RESP,
                to=m.frm,
                frm=self.id,
                term=self.term,
                index=index,
                reject=reject,
                reject_hint=reject_hint,
                log_term=log_term,
                epoch=m.epoch,
            )
        )

    def _handle_snapshot(self, m: Message) -> None:
        snap = m.snapshot
        if snap is None:
            raise InvariantViolation("snapshot message without a snapshot")
        meta = snap.meta
        if meta.index <= self.log.committed:
            index = self.log.committed
        elif self.log.match_term(meta.index, meta.term):
            # We already hold the snapshot's last entry: only the commit index moves.
            self.log.commit_to(meta.index)
            index = self.log.committed
        else:
            self.restore(snap)
            index = meta.index
        self.verified = max(self.verified, index)
        self._answer_append(m, index)

    def restore(self, snap: Snapshot) -> None:
        """Replace log and configuration with ``snap`` (persisted by the next Ready)."""
        self.log.restore(snap)
        self.conf = snap.meta.conf
