"""Elections: pre-vote, check-quorum, the leader lease, leadership transfer."""

from __future__ import annotations

import pytest

from raftlog.core import NONE, Message, MsgType, Role
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
    for k in range(5):
        c.nodes[1].propose(b"%d" % k)
    c.stabilize()
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
