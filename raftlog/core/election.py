"""Elections: campaigns, votes, and the rules that keep a failover within a few ticks.

Safety (Raft paper section 3.4, etcd-io/raft's pre-vote and check-quorum): one vote per term,
persisted before it is sent (votes ride ``msgs_after_persist``), and only for a log at least
as up to date as the voter's; a pre-vote asks whether a campaign could win before any term is
raised; voters that heard a leader within an election timeout ignore campaigns (the lease,
in `Raft.step`), so a node cut off and back disturbs nobody.

Liveness (nothing here can elect two leaders in a term; each rule only saves time):

- **prompt campaigns**: a follower told its leader is gone (the connection to its node
  dropped, or node liveness turned that node suspect) forgets it and campaigns within 1-2
  ticks per rank among the other voters (`report_peer_down`, `prompt_campaign_ticks`), instead
  of waiting out a randomized election timeout of up to twice the base one;
- **no split term**: pre-candidates whose requests cross would grant each other, stand for
  the same term, vote for themselves and split it; one that grants a lower-numbered
  pre-candidate stands down instead (`_handle_vote_request`);
- **ask again**: a (pre-)candidate asks the voters that have not answered every
  `VOTE_RETRY_TICKS` (a request lost, or ignored in a lease that has ended since);
- **the better log steps up**: a leaderless follower that refuses a pre-vote only because its
  own log is ahead campaigns at its next tick.

`Elections` is a mixin of `raftlog.core.raft.Raft`: it owns no state, and the attributes
declared below are `Raft`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.core.quorum import VoteResult, vote_result
from raftlog.core.types import NONE, ConfState, Message, MsgType, Role

if TYPE_CHECKING:
    import random

    from raftlog.core.config import Config
    from raftlog.core.log import RaftLog

VOTE_RETRY_TICKS = 3
"""A (pre-)candidate asks the voters that have not answered again this often, in ticks."""


class Elections:
    """Campaigns and votes (a mixin of `Raft`; see the module docstring)."""

    id: int
    cfg: Config
    log: RaftLog
    rng: random.Random
    term: int
    vote: int
    lead: int
    role: Role
    conf: ConfState
    votes: dict[int, bool]
    election_elapsed: int
    randomized_timeout: int
    rejoining: bool
    campaign_transfer: bool

    def _send(self, m: Message) -> None:
        raise NotImplementedError

    def promotable(self) -> bool:
        raise NotImplementedError

    def recovery_allows_vote(self, m: Message) -> bool:
        raise NotImplementedError  # `RecoveryGuard`'s, before this class in `Raft`'s bases

    def become_follower(self, term: int, lead: int) -> None:
        raise NotImplementedError

    def become_pre_candidate(self) -> None:
        raise NotImplementedError

    def become_candidate(self) -> None:
        raise NotImplementedError

    def become_leader(self) -> None:
        raise NotImplementedError

    def _step_follower(self, m: Message) -> None:
        raise NotImplementedError

    def campaign(self, *, pre: bool, transfer: bool = False) -> None:
        """Start a (pre-)election. A single-voter group wins at once."""
        if not self.promotable():
            return
        if pre:
            self.become_pre_candidate()
        else:
            self.become_candidate()
        self.votes[self.id] = True
        self.campaign_transfer = transfer
        if self._tally() is VoteResult.WON:
            self._won(pre=pre)
            return
        self._request_votes()

    def _request_votes(self) -> None:
        """Ask every voter that has not answered this (pre-)campaign yet for its vote."""
        pre = self.role is Role.PRE_CANDIDATE
        msg_type = MsgType.PRE_VOTE if pre else MsgType.VOTE
        term = self.term + 1 if pre else self.term
        for node in self.conf.voters:
            if node == self.id or node in self.votes:
                continue
            self._send(
                Message(
                    msg_type,
                    to=node,
                    frm=self.id,
                    term=term,
                    index=self.log.last_index(),
                    log_term=self.log.last_term(),
                    transfer=self.campaign_transfer,
                )
            )

    def _tally(self) -> VoteResult:
        return vote_result(self.conf.voters, self.votes)

    def _won(self, *, pre: bool) -> None:
        if pre:
            self.campaign(pre=False)
        else:
            self.become_leader()

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.promotable() and self.election_elapsed >= self.randomized_timeout:
            self.election_elapsed = 0
            self.campaign(pre=self.cfg.pre_vote)
        elif (
            self.role in (Role.PRE_CANDIDATE, Role.CANDIDATE)
            and self.election_elapsed % VOTE_RETRY_TICKS == 0
        ):
            # A request may have been lost, or ignored by a voter that still heard the old
            # leader a moment ago (its lease) and has since forgotten it: asking again costs
            # a message, waiting costs the rest of the election timeout.
            self._request_votes()

    def _handle_vote_request(self, m: Message) -> None:
        resp_type = MsgType.VOTE_RESP if m.type is MsgType.VOTE else MsgType.PRE_VOTE_RESP
        can_vote = (
            not self.rejoining
            and self.recovery_allows_vote(m)
            and (
                self.vote == m.frm
                or (self.vote == NONE and self.lead == NONE)
                or (m.type is MsgType.PRE_VOTE and m.term > self.term)
                or (self.cfg.unsafe.vote_twice and m.type is MsgType.VOTE)
            )
        )
        if can_vote and self.log.is_up_to_date(m.index, m.log_term):
            # A granted pre-vote answers in the candidate's future term so it can count it.
            self._send(Message(resp_type, to=m.frm, frm=self.id, term=m.term))
            if m.type is MsgType.VOTE:
                self.election_elapsed = 0
                self.vote = m.frm
            elif self.role is Role.PRE_CANDIDATE and m.frm < self.id:
                # Two followers that start pre-campaigns at nearly the same time (their
                # leader's connection dropped, or it fell silent, for both at once) would
                # grant each other, both stand for the next term, vote for themselves and
                # split it: a whole election timeout more. The higher-numbered one stands
                # down once it granted the lower-numbered one, which goes on; a lower one
                # whose log is behind is refused and does not make it stand down.
                self.become_follower(self.term, NONE)
        else:
            self._send(Message(resp_type, to=m.frm, frm=self.id, term=self.term, reject=True))
            if (
                can_vote
                and m.type is MsgType.PRE_VOTE
                and self.role is Role.FOLLOWER
                and self.lead == NONE
                and self.promotable()
            ):
                # Refused for its log alone: a peer wants an election it cannot win and this
                # node, whose log is ahead, could. Campaign at the next tick rather than at the
                # end of the election timeout (a leader that stepped down for want of a quorum
                # would otherwise wait it out while its peer, back but behind, asks in vain).
                self.election_elapsed = max(self.election_elapsed, self.randomized_timeout - 1)

    def _step_candidate(self, m: Message) -> None:
        expected = MsgType.PRE_VOTE_RESP if self.role is Role.PRE_CANDIDATE else MsgType.VOTE_RESP
        if m.type in (MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP):
            self.become_follower(m.term, m.frm)
            self._step_follower(m)
        elif m.type is expected:
            self.votes.setdefault(m.frm, not m.reject)
            result = self._tally()
            if result is VoteResult.WON:
                self._won(pre=self.role is Role.PRE_CANDIDATE)
            elif result is VoteResult.LOST:
                self.become_follower(self.term, NONE)

    def report_peer_down(self, peer: int) -> None:
        """The connection to ``peer`` dropped (its process died, or the link broke). A follower
        led by ``peer`` stops waiting out its election timeout: it forgets the leader (so it
        also grants the other followers' pre-votes at once) and campaigns within a few ticks,
        ordered by its rank among the other voters (`prompt_campaign_ticks`), so the followers
        of a crashed leader do not split the vote. Pre-vote keeps this harmless when the leader
        is alive: the voters that still hear it are in its lease and refuse, and this node
        follows it again at its next heartbeat (RabbitMQ's ra does the same on ``nodedown``)."""
        if self.role is not Role.FOLLOWER or self.lead != peer or not self.promotable():
            return
        self.lead = NONE
        self.election_elapsed = max(
            self.election_elapsed, self.randomized_timeout - self.prompt_campaign_ticks(peer)
        )

    def prompt_campaign_ticks(self, gone: int) -> int:
        """Ticks until this node campaigns after its leader ``gone`` dropped: 1-2 for the
        lowest-numbered other voter, 3-4 for the next, and so on (at most the election
        timeout)."""
        others = sorted(v for v in self.conf.voters if v != gone)
        rank = others.index(self.id) if self.id in others else len(others)
        return min(self.cfg.election_tick, 1 + 2 * rank + self.rng.randrange(2))
