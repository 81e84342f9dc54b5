"""The rollback guard: a restarted node may be running on an older copy of its disk.

A node restored from a backup, a snapshot of a virtual disk or a storage layer that lost
acknowledged writes comes back *plausible*: a valid log, term and vote, only older than what it
acknowledged. Raft assumes it never happens; if it does, the node can help elect a leader that
lacks entries it had acknowledged (so committed entries vanish) or vote twice in one term. From
its own disk alone a node cannot tell a rolled-back restart from an ordinary one, so every
restart of a voter in a multi-voter group goes through recovery (after protocol-aware recovery,
Alagappan et al., FAST '18):

1. **Ask.** The node starts *recovering*: it grants no vote or pre-vote and does not campaign.
   It asks every other voter for its term and last log position (`MsgType.RECOVER`), again every
   heartbeat interval until enough have answered. Every node answers at once, whatever its
   role or state, and neither message changes anyone's term.
2. **Enough answers.** With ``n`` voters and quorum ``q``, answers from ``n - q + 1`` other
   voters are needed: any majority that acknowledged an entry or granted a vote *together with
   this node* has at least ``q - 1`` other members, so at least one of them answered. (Three
   voters: both others; five: three of the four.) With every peer up this costs one round trip.
   While a needed peer is down the node stays out of elections: the price of the guarantee.
3. **Adopt.** The node raises its term to the highest term answered and grants no vote in
   that term (it may have voted in it before the rollback). It keeps the most up-to-date answered
   log position as a *floor*: it neither campaigns nor grants a vote to a candidate whose log is
   below the floor, until it holds the floor itself or has committed an entry of a term later
   than the one adopted (a leader that committed an entry of a later term holds every entry
   committed before it).
4. **Refresh.** The floor is a view of the peers' logs at one moment; an uncommitted tail it
   came from may be gone since (overwritten by a later leader, or lost in a rollback), and a floor
   nobody holds any more would keep the group from electing anyone. So while a floor is in force
   and no leader has been heard from for an election timeout, the node asks again and replaces
   the floor with the new answers. That is safe for the same reason the first answers were: an
   entry acknowledged with this node's help is still held by one of any ``n - q + 1`` others.

A node that is not a voter in its own latest configuration (it appended its removal) answers
with its commit position instead of its last entry: it can never campaign, so a floor set by its
uncommitted tail could keep a group from ever electing a leader. The price is a narrow window:
an entry this node acknowledged, lost to a rollback, and held beyond the commit index it knows
only by a voter that has since appended its own removal, is not protected.

Not covered: a node restored from a copy older than a membership change of its group. Its
configuration is stale, so it asks the voters of the old one, and the answers it counts may miss
every holder of what it lost. Restore a node only within one configuration, or wipe it and start
it in rejoin mode.

A rolled-back follower of a live leader is caught the same way as a wiped one: a heartbeat
claiming a commit index beyond its log means it lost entries it acknowledged, so it stops voting
until it holds that commit index again and asks the leader to re-probe it (`MsgType.LOG_LOST`).

`RecoveryGuard` is a mixin of `raftlog.core.raft.Raft`; the attributes declared below are
`Raft`'s. `UnsafeHooks.skip_recovery` turns the guard off (a planted bug for the simulator).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.core.quorum import quorum_size
from raftlog.core.types import NONE, ConfState, Message, MsgType

if TYPE_CHECKING:
    from raftlog.core.config import Config
    from raftlog.core.log import RaftLog

LogPosition = tuple[int, int]
"""(last term, last index): Raft's order of "more up to date"."""


class RecoveryGuard:
    """Recovery after a restart (a mixin of `Raft`; see the module docstring)."""

    id: int
    cfg: Config
    log: RaftLog
    term: int
    vote: int
    conf: ConfState

    rejoining: bool
    rejoin_target: int | None
    verified: int
    lost_acknowledged: int
    recovering: bool
    refreshing: bool
    election_elapsed: int
    recovery_answers: dict[int, Message]
    recovery_elapsed: int
    vote_floor: int
    """No vote is granted in a term at or below this one (unless already given to the asker)."""
    log_floor: LogPosition
    recovery_term: int

    def out_of_elections(self) -> bool:
        """Recovering after a restart or rejoining after lost entries: this replica neither
        votes nor campaigns, so it does not yet count towards a new quorum."""
        return self.recovering or self.rejoining

    def _send(self, m: Message) -> None:
        raise NotImplementedError

    def become_follower(self, term: int, lead: int) -> None:
        raise NotImplementedError

    def _log_lost(self, leader: int, commit: int) -> None:
        raise NotImplementedError

    def _heartbeat_commit(self, m: Message) -> None:
        """Take the commit index of the leader's heartbeat ``m`` (min(its commit, our match)),
        unless it shows this node lost entries or it reaches past what the leader matched."""
        if m.commit > self.log.last_index():
            # The leader counted entries this node no longer has (a wiped or rolled-back disk):
            # vote again only once it holds that commit index, and get re-probed.
            self.rejoining = True
            self.lost_acknowledged += 1
            self._log_lost(m.frm, m.commit)
        elif m.commit > max(self.verified, self.log.committed):
            # Entries this leader has not matched since a restart may differ from its log (a
            # disk restored from an older copy): get re-probed before committing them.
            last = self.log.last_index()
            self._send(Message(MsgType.LOG_LOST, to=m.frm, frm=self.id, term=self.term, index=last))
        else:
            self.log.commit_to(m.commit)
            if self.rejoining and self.rejoin_target is None:
                # Rejoining (a repair kept a prefix of this log) and the leader's commit index
                # is already held and verified here: that is the target, reached at once.
                self.rejoin_target = m.commit

    def _init_recovery(self, *, restarted: bool) -> None:
        self.recovering = restarted and not self.cfg.unsafe.skip_recovery
        self.refreshing = False
        self.recovery_answers = {}
        self.recovery_elapsed = 0
        self.vote_floor = 0
        self.log_floor = (0, 0)
        self.recovery_term = 0
        self._maybe_finish_recovery()

    def _own_position(self) -> LogPosition:
        return (self.log.last_term(), self.log.last_index())

    def _recovery_need(self) -> tuple[list[int], int]:
        """The voters to ask and how many answers are enough."""
        others = [v for v in self.conf.voters if v != self.id]
        n = len(self.conf.voters)
        return others, min(len(others), n - quorum_size(n) + 1) if n else 0

    def _tick_recovery(self) -> None:
        if self.recovering or self.refreshing:
            if self.recovery_elapsed % self.cfg.heartbeat_tick == 0:
                self._ask_peers()
            self.recovery_elapsed += 1
            self._maybe_finish_recovery()
        elif self.log_floor != (0, 0):
            self._maybe_clear_floor()
            self.recovery_elapsed += 1
            et = self.cfg.election_tick
            if self.log_floor != (0, 0) and min(self.election_elapsed, self.recovery_elapsed) >= et:
                self.refreshing = True  # no leader for a while: is the floor still held?
                self.recovery_answers = {}
                self.recovery_elapsed = 0

    def _ask_peers(self) -> None:
        others, _ = self._recovery_need()
        last_term, last_index = self._own_position()
        for v in others:
            if v not in self.recovery_answers:
                self._send(
                    Message(
                        MsgType.RECOVER,
                        to=v,
                        frm=self.id,
                        term=self.term,
                        index=last_index,
                        log_term=last_term,
                    )
                )

    def _step_recovery(self, m: Message) -> None:
        """Handle `RECOVER` (answer it) and `RECOVER_RESP` (count it); no term changes."""
        if m.type is MsgType.RECOVER:
            last_term, last_index = self._own_position()
            if self.id not in self.conf.voters:
                # A node that appended its own removal cannot lead: answering its whole log
                # would set a floor nobody can reach. Entries up to its commit index are the
                # ones it knows were committed (see the module docstring's caveat).
                last_index = self.log.committed
                last_term = self.log.term(last_index)
            self._send(
                Message(
                    MsgType.RECOVER_RESP,
                    to=m.frm,
                    frm=self.id,
                    term=self.term,
                    index=last_index,
                    log_term=last_term,
                )
            )
        elif self.recovering or self.refreshing:
            self.recovery_answers[m.frm] = m
            self._maybe_finish_recovery()

    def _maybe_finish_recovery(self) -> None:
        if not (self.recovering or self.refreshing):
            return
        others, need = self._recovery_need()
        answers = [self.recovery_answers[v] for v in others if v in self.recovery_answers]
        if len(answers) < need:
            return
        self.recovery_answers = {}
        floor = max([(a.log_term, a.index) for a in answers], default=(0, 0))
        self.log_floor = floor if floor > self._own_position() else (0, 0)
        self.recovery_elapsed = 0
        if self.refreshing:
            self.refreshing = False
            return
        self.recovering = False
        top = max([self.term, *(a.term for a in answers)])
        if top > self.term:
            self.become_follower(top, NONE)
        self.vote_floor = top
        self.recovery_term = top

    def _maybe_clear_floor(self) -> None:
        committed = self.log.committed
        if self._own_position() >= self.log_floor or self.log.term(committed) > self.recovery_term:
            self.log_floor = (0, 0)

    def recovery_allows_campaign(self) -> bool:
        """Whether recovery lets this node stand for election."""
        if self.recovering:
            return False
        if self.log_floor != (0, 0):
            self._maybe_clear_floor()
        return self._own_position() >= self.log_floor

    def recovery_allows_vote(self, m: Message) -> bool:
        """Whether recovery lets this node grant the (pre-)vote request ``m``."""
        if self.recovering:
            return False
        if m.type is MsgType.VOTE and m.term <= self.vote_floor and self.vote != m.frm:
            return False
        if self.log_floor != (0, 0):
            self._maybe_clear_floor()
        return (m.log_term, m.index) >= self.log_floor
