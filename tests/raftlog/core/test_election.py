"""Elections: pre-vote, check-quorum, the leader lease, leadership transfer."""

from __future__ import annotations

import pytest

from raftlog.core import NONE, Message, MsgType, Role
from raftlog.core.election import VOTE_RETRY_TICKS
from raftlog.errors import NotLeader
from tests.raftlog.core.harness import Cluster


def test_first_election_and_replication() -> None:
    c = Cluster(3)
    c.elect(1)
    assert [c.nodes[i].raft.lead for i in c.ids] == [1, 1, 1]
    idx = c.nodes[1].propose(b"a")
    c.stabilize()
    assert all(c.applied[i] == [(1, idx, b"a")] for i in c.ids)


def test_elections_happen_by_ticks_with_randomized_timeouts() -> None:
    c = Cluster(5, seed=7)
    c.tick(25)
    assert c.leader() != 0
    timeouts = {c.nodes[i].raft.randomized_timeout for i in c.ids}
    assert all(10 <= t < 20 for t in timeouts)
    assert len(timeouts) > 1  # drawn from the injected RNG, not all equal


def test_single_voter_becomes_leader_alone() -> None:
    c = Cluster(1)
    c.elect(1)
    c.nodes[1].propose(b"solo")
    c.stabilize()
    assert c.applied[1][-1][2] == b"solo"


def test_pre_vote_keeps_a_partitioned_node_from_raising_its_term() -> None:
    c = Cluster(3)
    c.elect(1)
    c.isolate(3)
    c.tick(100)
    assert c.nodes[3].raft.term == 1  # pre-votes failed: term never moved
    assert c.nodes[3].raft.role is Role.PRE_CANDIDATE
    c.heal()
    c.tick(3)
    assert c.leader() == 1 and c.nodes[1].raft.term == 1


def test_without_pre_vote_a_rejoining_node_disrupts_the_leader() -> None:
    c = Cluster(3, pre_vote=False, check_quorum=False)
    c.elect(1)
    c.isolate(3)
    c.tick(40)
    assert c.nodes[3].raft.term > 1  # the contrast that pre-vote prevents
    c.heal()
    c.tick(40)
    assert c.nodes[1].raft.term > 1


def test_check_quorum_deposes_an_isolated_leader_within_an_election_timeout() -> None:
    c = Cluster(3)
    c.elect(1)
    c.isolate(1)
    c.tick(c.nodes[1].raft.cfg.election_tick * 2)
    assert c.nodes[1].raft.role is Role.FOLLOWER
    with pytest.raises(NotLeader):
        c.nodes[1].propose(b"x")


def test_leader_lease_ignores_disruptive_vote_requests() -> None:
    c = Cluster(3)
    c.elect(1)
    f = c.nodes[2]
    before = f.raft.term
    f.step(Message(MsgType.VOTE, to=2, frm=3, term=before + 5, index=99, log_term=99))
    assert f.raft.term == before and f.raft.vote == 1
    # A transfer-initiated campaign bypasses the lease.
    f.step(
        Message(MsgType.VOTE, to=2, frm=3, term=before + 5, index=99, log_term=99, transfer=True)
    )
    assert f.raft.term == before + 5 and f.raft.vote == 3


def test_one_vote_per_term() -> None:
    c = Cluster(3, check_quorum=False)
    n = c.nodes[3]
    n.step(Message(MsgType.VOTE, to=3, frm=1, term=2, index=1, log_term=1))
    n.step(Message(MsgType.VOTE, to=3, frm=2, term=2, index=1, log_term=1))
    rd = n.ready()
    votes = [m for m in rd.persisted_messages if m.type is MsgType.VOTE_RESP]
    assert [(m.to, m.reject) for m in votes] == [(1, False), (2, True)]
    assert rd.hard_state is not None and rd.hard_state.vote == 1
    assert not rd.messages  # a vote may only leave after it is durable


def test_vote_refused_to_a_less_up_to_date_log() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].propose(b"x")
    c.stabilize()
    n = c.nodes[2]
    n.step(Message(MsgType.VOTE, to=2, frm=3, term=9, index=1, log_term=1, transfer=True))
    rd = n.ready()
    assert [m.reject for m in rd.persisted_messages if m.type is MsgType.VOTE_RESP] == [True]


def test_leadership_transfer_to_caught_up_follower() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].transfer_leader(2)
    c.stabilize()
    assert c.leader() == 2
    assert c.nodes[2].raft.term == 2


def test_leadership_transfer_catches_up_a_lagging_target_first() -> None:
    c = Cluster(3)
    c.elect(1)
    c.isolate(3)
    c.propose_many(1, 5)
    c.heal()
    c.nodes[1].transfer_leader(3)
    with pytest.raises(NotLeader) as info:
        c.nodes[1].propose(b"refused during transfer")
    assert info.value.leader_hint == 3
    c.stabilize()
    assert c.leader() == 3
    assert c.nodes[3].raft.log.last_index() >= 8


def test_leadership_transfer_aborts_after_an_election_timeout() -> None:
    c = Cluster(3)
    c.elect(1)
    c.isolate(3)
    c.nodes[1].transfer_leader(3)
    assert c.nodes[1].raft.lead_transferee == 3
    # Node 2 keeps the leader in quorum; the transfer to the unreachable node gives up.
    c.dropped.discard((1, 2))
    c.dropped.discard((2, 1))
    c.tick(c.nodes[1].raft.cfg.election_tick + 1)
    assert c.leader() == 1 and c.nodes[1].raft.lead_transferee == NONE
    c.nodes[1].propose(b"accepted again")


def test_follower_proposal_fails_fast_with_leader_hint() -> None:
    c = Cluster(3)
    c.elect(2)
    with pytest.raises(NotLeader) as info:
        c.nodes[3].propose(b"x")
    assert info.value.retriable and info.value.leader_hint == 2


def _leader_dies(c: Cluster, leader: int) -> None:
    """``leader`` crashes and every other node's connection to it drops."""
    c.isolate(leader)
    for i in c.ids:
        if i != leader:
            c.nodes[i].report_peer_down(leader)


@pytest.mark.parametrize("n", [3, 5])
def test_followers_of_a_crashed_leader_elect_within_a_few_ticks(n: int) -> None:
    for seed in range(20):
        c = Cluster(n, seed=seed)
        c.elect(1)
        c.tick(3)  # the followers heard the leader: in its lease
        _leader_dies(c, 1)
        ticks, leaders = 0, []
        while not leaders and ticks < 30:
            c.tick(1)
            ticks += 1
            leaders = [i for i in c.ids if i != 1 and c.nodes[i].raft.role is Role.LEADER]
        # The lowest-ranked follower campaigns after 1-2 ticks; without the report it waits out
        # its randomized election timeout (10-19 ticks).
        assert leaders == [2] and ticks <= 2, (seed, leaders, ticks)


def test_a_dropped_connection_to_a_live_leader_disrupts_nothing() -> None:
    c = Cluster(3)
    c.elect(1)
    c.tick(3)
    c.nodes[3].report_peer_down(1)  # only node 3's link broke, and reconnected at once
    assert c.nodes[3].raft.lead == NONE
    c.tick(30)
    assert c.leader() == 1 and c.nodes[1].raft.term == 1  # node 2 and 1 refused the pre-vote
    assert c.nodes[3].raft.lead == 1  # following again after the next heartbeat


def test_a_peer_that_did_not_lead_changes_nothing() -> None:
    c = Cluster(3)
    c.elect(1)
    c.tick(3)
    before = c.nodes[2].raft.election_elapsed
    c.nodes[2].report_peer_down(3)
    assert c.nodes[2].raft.lead == 1 and c.nodes[2].raft.election_elapsed == before


def _leaders(c: Cluster, among: list[int]) -> list[int]:
    return [i for i in among if c.nodes[i].raft.role is Role.LEADER]


def _time_out_together(c: Cluster, ids: list[int]) -> None:
    """Each of ``ids`` times out at the next tick: their pre-votes cross."""
    for i in ids:
        r = c.nodes[i].raft
        r.election_elapsed = r.randomized_timeout - 1
    c.tick(1)


@pytest.mark.parametrize("n", [3, 5])
def test_pre_candidates_that_start_together_do_not_split_the_vote(n: int) -> None:
    c = Cluster(n)
    c.elect(1)
    c.tick(3)
    c.isolate(1)  # silent, like a paused process: nobody is told
    for i in c.ids[1:]:
        c.nodes[i].raft.election_elapsed = c.nodes[i].raft.cfg.election_tick  # lease over
    _time_out_together(c, c.ids[1:])
    # Each would grant the other's pre-vote, stand for term 2 and vote for itself; the lowest
    # id wins instead, in the first term tried.
    assert _leaders(c, c.ids[1:]) == [2] and c.nodes[2].raft.term == 2, [
        (i, nd.raft.role, nd.raft.term) for i, nd in c.nodes.items()
    ]


def _leader_gone_with(c: Cluster, behind: int) -> None:
    """Node 1 leads a 3-node cluster, commits an entry ``behind`` lacks, then falls silent."""
    c.elect(1)
    c.isolate(behind)
    c.nodes[1].propose(b"not on %d" % behind)
    c.stabilize()
    c.heal()
    c.isolate(1)


def test_a_pre_candidate_whose_log_is_behind_yields_to_a_higher_id() -> None:
    c = Cluster(3)
    _leader_gone_with(c, behind=2)
    for i in (2, 3):
        c.nodes[i].raft.election_elapsed = c.nodes[i].raft.cfg.election_tick
    assert c.nodes[3].raft.log.last_index() > c.nodes[2].raft.log.last_index()
    _time_out_together(c, [2, 3])
    assert _leaders(c, [2, 3]) == [3] and c.nodes[3].raft.term == 2


def test_a_stuck_lower_pre_candidate_does_not_hold_up_a_higher_one() -> None:
    """Node 2 pre-campaigns while node 3 still hears the (now silent) leader: node 3 ignores
    it, and node 2 waits on an answer that never comes. Node 3's own pre-campaign a little
    later must still win at once (a lower id is no reason to refuse)."""
    c = Cluster(3)
    c.elect(1)
    c.tick(3)
    c.isolate(1)
    _time_out_together(c, [2])
    assert c.nodes[2].raft.role is Role.PRE_CANDIDATE  # node 3 was in the leader's lease
    c.nodes[3].raft.election_elapsed = c.nodes[3].raft.cfg.election_tick
    _time_out_together(c, [3])
    assert _leaders(c, [2, 3]) == [3] and c.nodes[3].raft.term == 2


def test_a_pre_candidate_asks_again_a_voter_that_ignored_it_in_the_lease() -> None:
    """Node 3 still heard the leader when node 2's pre-vote came, so it ignored it, then
    learned the leader is gone (its connection dropped). Node 3's log is behind, so only node
    2 can win: it must ask again within a few ticks, not after its whole election timeout."""
    c = Cluster(3)
    _leader_gone_with(c, behind=3)
    c.nodes[3].raft.election_elapsed = 0  # in the leader's lease
    c.nodes[2].raft.election_elapsed = c.nodes[2].raft.cfg.election_tick
    _time_out_together(c, [2])
    assert c.nodes[2].raft.role is Role.PRE_CANDIDATE
    c.nodes[3].report_peer_down(1)
    ticks = 0
    while not _leaders(c, [2, 3]) and ticks < 20:
        c.tick(1)
        ticks += 1
    assert _leaders(c, [2, 3]) == [2] and ticks <= VOTE_RETRY_TICKS, ticks


def test_a_leaderless_follower_ahead_of_a_refused_pre_candidate_campaigns_at_once() -> None:
    c = Cluster(3)
    _leader_gone_with(c, behind=2)
    c.nodes[3].raft.become_follower(c.nodes[3].raft.term, NONE)  # no leader, fresh timeout
    c.nodes[2].raft.election_elapsed = c.nodes[2].raft.cfg.election_tick
    _time_out_together(c, [2])  # refused by node 3: its log is behind
    c.tick(1)
    assert _leaders(c, [2, 3]) == [3]
