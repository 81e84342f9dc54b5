"""The Raft protocol for one group on one node: a pure, synchronous state machine.

Inputs are `step` (a message), `tick` (one unit of logical time), `propose`, and the
persistence/apply notifications `RawNode` feeds in. Outputs are messages (two queues: those that
may leave at once and those that must wait for the pending writes to be durable) and the log
bookkeeping `RawNode` turns into a `Ready`. No clocks, files, sockets or global randomness here:
time is ticks and randomness comes from the injected ``random.Random``.

Safety rules this module implements (Raft paper, sections 3 and 4; etcd-io/raft conventions):
- one vote per term, persisted before the vote is sent (votes ride ``msgs_after_persist``);
- pre-vote: a node asks whether it *could* win before disturbing the cluster with a new term;
- check-quorum: a leader that has not heard from a quorum for an election timeout steps down,
  and voters that heard from a leader within one ignore campaigns (the leader lease);
- liveness, not safety: a follower told its leader is gone campaigns within a few ticks by
  rank (`report_peer_down`), a pre-candidate that grants a lower-numbered one stands down (no
  split term), unanswered voters are asked again every `VOTE_RETRY_TICKS`, and a leaderless
  follower that refuses a pre-vote only for its log campaigns at its next tick;
- commit only on a majority of *durable* match indexes, and only entries of the current term
  by counting (earlier ones commit indirectly); the leader's own match moves when its entries are
  reported persisted, so its write overlaps replication;
- followers truncate only at a real term conflict, never matching or committed entries;
- single-server membership changes, applied when committed, at most one pending at a time, and
  not before the leader has committed an entry of its own term.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from raftlog.core.log import RaftLog
from raftlog.core.progress import Progress, ProgressState
from raftlog.core.storage import Storage
from raftlog.core.types import (
    NONE,
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    EntryKind,
    Message,
    MsgType,
    Role,
)
from raftlog.errors import (
    ConfChangeInProgress,
    InvariantViolation,
    LearnerNotReady,
    NotLeader,
    Overloaded,
    RaftError,
)

if TYPE_CHECKING:
    import random


from raftlog.core.config import Config
from raftlog.core.election import Elections
from raftlog.core.follower import FollowerReplication
from raftlog.core.leader import LeaderReplication
from raftlog.core.recovery import RecoveryGuard

_LEADER_MESSAGES = frozenset({MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP, MsgType.TIMEOUT_NOW})


class Raft(FollowerReplication, LeaderReplication, RecoveryGuard, Elections):
    """Protocol state of one node in one group. Owned and driven by a `RawNode`. The leader's
    replication and commit rules live in `LeaderReplication`, the follower's in
    `FollowerReplication`."""

    def __init__(self, config: Config, storage: Storage, rng: random.Random) -> None:
        config.validate()
        self.cfg = config
        self.id = config.id
        self.rng = rng
        self.log = RaftLog(storage)
        hs, conf = storage.initial_state()
        self.term = hs.term
        self.vote = hs.vote
        if hs.commit:
            if hs.commit > self.log.last_index():
                raise InvariantViolation(
                    f"persisted commit {hs.commit} beyond last index {self.log.last_index()}"
                )
            self.log.commit_to(hs.commit)
        self.conf = conf
        self.role = Role.FOLLOWER
        self.lead = NONE
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}
        self.msgs: list[Message] = []
        self.msgs_after_persist: list[Message] = []
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = config.election_tick
        self.lead_transferee = NONE
        self.campaign_transfer = False  # the running campaign was started by a transfer
        self.pending_conf_index = 0
        # (index, size) of entries proposed by this leader and not yet committed: bounds memory.
        self.uncommitted: deque[tuple[int, int]] = deque()
        self.uncommitted_bytes = 0
        self.snapshot_elapsed: dict[int, int] = {}
        self.progress_epochs = 0  # the last `Progress.epoch` handed out
        # Rejoining after data loss: the commit index to reach before voting (None: unknown).
        self.rejoining = config.rejoin
        self.rejoin_target: int | None = None
        # The highest index the current leader's appends have shown to match its log (0 after
        # a restart or a change of term): heartbeats commit no further than this.
        self.verified = 0
        # Heartbeats that showed this node lacks entries it had acknowledged (its disk was
        # wiped, restored from an older copy, or lied about an fsync): reported by the runtime.
        self.lost_acknowledged = 0
        self._reset_randomized_timeout()
        # A node that has been in a term may have been restored from an older disk: it
        # recovers before it votes (`raftlog.core.recovery`). A fresh node has nothing to lose.
        self._init_recovery(restarted=hs.term > 0)

    # -- helpers -----------------------------------------------------------------------------------
    def promotable(self) -> bool:
        """Whether this node is a voter that may campaign (not while rejoining or recovering)."""
        return (
            self.id in self.conf.voters and not self.rejoining and self.recovery_allows_campaign()
        )

    def _reset_randomized_timeout(self) -> None:
        et = self.cfg.election_tick
        if self.cfg.unsafe.slow_elections:
            et *= 8
        self.randomized_timeout = et + self.rng.randrange(et)

    def _send(self, m: Message) -> None:
        if self.role is Role.LEADER and m.type in _LEADER_MESSAGES:
            self.msgs.append(m)
        else:
            self.msgs_after_persist.append(m)

    def _reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = NONE
        self.lead = NONE
        self.verified = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self._reset_randomized_timeout()
        self.lead_transferee = NONE
        self.votes = {}
        self.progress = {}
        self.snapshot_elapsed = {}
        self.uncommitted.clear()
        self.uncommitted_bytes = 0

    def _new_progress(self, node: int) -> Progress:
        pr = Progress(
            self.log.last_index() + 1,
            self.cfg.max_inflight_msgs,
            self.cfg.max_inflight_bytes,
            node in self.conf.learners,
        )
        self.progress_epochs += 1
        pr.epoch = self.progress_epochs
        if node == self.id:
            pr.match = self.log.stable_last()
            pr.become_replicate()
            pr.recent_active = True
        return pr

    # -- role changes ------------------------------------------------------------------------------
    def become_follower(self, term: int, lead: int) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead

    def become_pre_candidate(self) -> None:
        if self.role is Role.LEADER:
            raise InvariantViolation("leader cannot become pre-candidate")
        # Term and vote stay: a pre-campaign changes nothing durable.
        self.role = Role.PRE_CANDIDATE
        self.votes = {}
        self.lead = NONE
        self.election_elapsed = 0
        self._reset_randomized_timeout()

    def become_candidate(self) -> None:
        if self.role is Role.LEADER:
            raise InvariantViolation("leader cannot become candidate")
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def become_leader(self) -> None:
        if self.role is Role.FOLLOWER:
            raise InvariantViolation("follower cannot become leader directly")
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        for node in self.conf.members():
            self.progress[node] = self._new_progress(node)
        # The no-op of this term: committing it commits every earlier entry, and until it is
        # applied no membership change may be proposed (the single-server change fix).
        self._append_own([Entry(self.term, self.log.last_index() + 1)])
        self.pending_conf_index = self.log.last_index()
        self._bcast_append()

    # -- ticks -------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Advance logical time by one tick."""
        self._tick_recovery()
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_tick:
            self.election_elapsed = 0
            if self.cfg.check_quorum:
                if not self._quorum_active():
                    self.become_follower(self.term, NONE)
                    return
                for node, pr in self.progress.items():
                    pr.recent_active = node == self.id
            if self.lead_transferee != NONE:
                self.lead_transferee = NONE  # transfer took too long: abort, accept proposals
        for node, pr in self.progress.items():
            if pr.state is ProgressState.SNAPSHOT:
                elapsed = self.snapshot_elapsed.get(node, 0) + 1
                self.snapshot_elapsed[node] = elapsed
                if elapsed > 3 * self.cfg.election_tick:
                    # The snapshot (or its answer) was lost: probe again.
                    self.snapshot_elapsed.pop(node, None)
                    pr.become_probe()
        if self.heartbeat_elapsed >= self.cfg.heartbeat_tick:
            self.heartbeat_elapsed = 0
            self._bcast_heartbeat()

    def _quorum_active(self) -> bool:
        active = sum(
            1
            for node in self.conf.voters
            if node in self.progress and (node == self.id or self.progress[node].recent_active)
        )
        return active >= len(self.conf.voters) // 2 + 1

    # -- proposals ---------------------------------------------------------------------------------
    def propose(self, data: bytes, kind: EntryKind = EntryKind.NORMAL) -> int:
        """Append ``data`` as a new entry; returns its index. Raises a retriable error if this
        node cannot accept it now (not leader, transferring, window full, change pending)."""
        if self.role is not Role.LEADER or self.id not in self.progress:
            raise NotLeader(self.lead)
        if self.lead_transferee != NONE:
            raise NotLeader(self.lead_transferee, "leadership transfer in progress")
        size = len(data) + 24
        if self.uncommitted_bytes > 0 and self.uncommitted_bytes + size > (
            self.cfg.max_uncommitted_bytes
        ):
            raise Overloaded(f"uncommitted log is full ({self.uncommitted_bytes} bytes)")
        if kind is EntryKind.CONF:
            if self.pending_conf_index > self.log.applied:
                raise ConfChangeInProgress(
                    f"membership change at {self.pending_conf_index} not yet applied"
                )
            self._validate_conf_change(ConfChange.decode(data))
        index = self.log.last_index() + 1
        self._append_own([Entry(self.term, index, kind, data)])
        if kind is EntryKind.CONF:
            self.pending_conf_index = index
        self._bcast_append()
        return index

    def _validate_conf_change(self, cc: ConfChange) -> None:
        if cc.node <= 0:
            raise RaftError(f"invalid node id {cc.node}")
        if cc.kind is ConfChangeKind.PROMOTE:
            if cc.node not in self.conf.learners:
                raise RaftError(f"node {cc.node} is not a learner")
            pr = self.progress.get(cc.node)
            if pr is None or pr.match < self.log.committed:
                # A voter that holds nothing yet would only weaken the quorum (and, if it
                # is rejoining after data loss, could not even vote): catch up first.
                match = 0 if pr is None else pr.match
                raise LearnerNotReady(
                    f"learner {cc.node} has {match} of {self.log.committed} committed entries"
                )
        if cc.kind is ConfChangeKind.ADD_LEARNER and cc.node in self.conf.voters:
            raise RaftError(f"node {cc.node} is already a voter")
        if cc.kind is ConfChangeKind.REMOVE:
            if cc.node not in self.conf.members():
                raise RaftError(f"node {cc.node} is not a member")
            if self.conf.voters == (cc.node,):
                raise RaftError("cannot remove the last voter")

    def _append_own(self, entries: list[Entry]) -> None:
        self.log.append(entries)
        for e in entries:
            self.uncommitted.append((e.index, e.size()))
            self.uncommitted_bytes += e.size()

    # -- stepping ----------------------------------------------------------------------------------
    def step(self, m: Message) -> None:
        """Process one message from the network."""
        if m.type in (MsgType.RECOVER, MsgType.RECOVER_RESP):
            self._step_recovery(m)  # about restarts, not terms: see `raftlog.core.recovery`
            return
        if m.term > self.term:
            if m.type in (MsgType.VOTE, MsgType.PRE_VOTE):
                in_lease = (
                    self.cfg.check_quorum
                    and self.lead != NONE
                    and self.election_elapsed < self.cfg.election_tick
                )
                if in_lease and not m.transfer:
                    return  # a leader was heard from recently: do not let anyone disrupt it
            if m.type is MsgType.PRE_VOTE or (m.type is MsgType.PRE_VOTE_RESP and not m.reject):
                pass  # pre-votes are about a future term and change nothing here
            elif m.type in (MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP):
                self.become_follower(m.term, m.frm)
            else:
                self.become_follower(m.term, NONE)
        elif m.term < self.term:
            if m.type in (MsgType.APP, MsgType.HEARTBEAT):
                # A stale leader (perhaps partitioned, never raising its term thanks to
                # pre-vote) learns the current term from this answer and steps down.
                self._send(Message(MsgType.APP_RESP, to=m.frm, frm=self.id, term=self.term))
            elif m.type is MsgType.PRE_VOTE:
                self._send(
                    Message(
                        MsgType.PRE_VOTE_RESP, to=m.frm, frm=self.id, term=self.term, reject=True
                    )
                )
            return

        if m.type in (MsgType.VOTE, MsgType.PRE_VOTE):
            self._handle_vote_request(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            self._step_candidate(m)
        else:
            self._step_follower(m)

    def _step_follower(self, m: Message) -> None:
        if m.type is MsgType.APP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_append(m)
        elif m.type is MsgType.HEARTBEAT:
            self.election_elapsed = 0
            self.lead = m.frm
            self._heartbeat_commit(m)
            self._send(Message(MsgType.HEARTBEAT_RESP, to=m.frm, frm=self.id, term=self.term))
        elif m.type is MsgType.SNAP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_snapshot(m)
        elif m.type is MsgType.TIMEOUT_NOW:
            self.campaign(pre=False, transfer=True)

    # -- leadership transfer, membership, reports ------------------------------------------------
    def transfer_leader(self, to: int) -> None:
        """Hand leadership to voter ``to``: catch it up, then tell it to campaign at once.

        Proposals are refused while the transfer runs; it is abandoned after an election
        timeout if it has not completed.
        """
        if self.role is not Role.LEADER:
            raise NotLeader(self.lead)
        if to == self.id:
            return
        if to not in self.conf.voters:
            raise RaftError(f"node {to} is not a voter")
        if self.lead_transferee == to:
            return
        self.lead_transferee = to
        self.election_elapsed = 0
        if self.progress[to].match == self.log.last_index():
            self._send_timeout_now(to)
        else:
            self._send_append(to)

    def _send_timeout_now(self, to: int) -> None:
        self._send(Message(MsgType.TIMEOUT_NOW, to=to, frm=self.id, term=self.term))

    def apply_conf_change(self, cc: ConfChange) -> None:
        """Apply a committed membership change to the configuration and the trackers."""
        self.conf = self.conf.apply(cc)
        if self.role is not Role.LEADER:
            return
        members = set(self.conf.members())
        for node in list(self.progress):
            if node not in members:
                del self.progress[node]
                self.snapshot_elapsed.pop(node, None)
        for node in members:
            if node not in self.progress:
                self.progress[node] = self._new_progress(node)
            self.progress[node].is_learner = node in self.conf.learners
        if self.id not in self.conf.voters:
            # Removed (or demoted): stop leading; the remaining voters elect a successor.
            self.become_follower(self.term, NONE)
            return
        if self.lead_transferee != NONE and self.lead_transferee not in self.conf.voters:
            self.lead_transferee = NONE
        # The quorum may have shrunk (commit can advance) and new members need appends.
        self._maybe_commit()
        self._bcast_append()

    def report_unreachable(self, to: int) -> None:
        """The transport failed to deliver to ``to``: stop optimistic pipelining to it."""
        pr = self.progress.get(to)
        if pr is not None and pr.state is ProgressState.REPLICATE:
            pr.become_probe()

    def report_snapshot(self, to: int, ok: bool) -> None:
        """The transport finished (``ok``) or failed sending a snapshot to ``to``."""
        pr = self.progress.get(to)
        if pr is None or pr.state is not ProgressState.SNAPSHOT:
            return
        if not ok:
            pr.pending_snapshot = 0
        pr.become_probe()
        # Wait for the next heartbeat answer before probing again.
        pr.msg_app_probe_paused = True
        self.snapshot_elapsed.pop(to, None)

    def conf_state(self) -> ConfState:
        return self.conf
