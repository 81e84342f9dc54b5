"""Snapshots (install, compaction, restore) and single-server membership changes with learners."""

from __future__ import annotations

import random

import pytest

from raftlog.core import (
    ConfChange,
    ConfChangeKind,
    Config,
    ConfState,
    MemoryStorage,
    Message,
    MsgType,
    RawNode,
    Role,
)
from raftlog.errors import ConfChangeInProgress, NotLeader, RaftError
from tests.raftlog.core.harness import Cluster, compact


def datas(c: Cluster, i: int) -> list[bytes]:
    return [d for _, _, d in c.applied[i]]


def test_lagging_follower_is_caught_up_by_snapshot() -> None:
    c = Cluster(3)
    c.elect(1)
    c.isolate(3)
    c.propose_many(1, 10, b"m")
    at = compact(c, 1)
    assert c.storage[1].first_index() == at + 1
    c.heal()
    sent_snap = []
    for _ in range(5):
        c.tick()
        sent_snap.extend(m for m in c.queue if m.type is MsgType.SNAP)
        c.stabilize()
    c.tick(2)
    assert c.storage[3].snapshot().meta.index == at
    assert datas(c, 3) == datas(c, 1)
    c.nodes[1].propose(b"after")
    c.stabilize()
    assert datas(c, 3)[-1] == b"after"


def test_snapshot_for_a_matching_log_only_advances_commit() -> None:
    c = Cluster(3)
    c.elect(1)
    c.propose_many(1, 3)
    snap = c.storage[1].create_snapshot(3, c.nodes[1].raft.conf, b"")
    before = c.storage[2].last_index()
    c.nodes[2].step(Message(MsgType.SNAP, to=2, frm=1, term=1, snapshot=snap))
    rd = c.nodes[2].ready()
    assert rd.snapshot is None  # nothing to install: the log already holds those entries
    c.nodes[2].advance(rd)
    assert c.nodes[2].raft.log.last_index() == before


def test_restart_from_a_compacted_log() -> None:
    c = Cluster(3)
    c.elect(1)
    c.propose_many(1, 6)
    compact(c, 2)
    node = RawNode(Config(2), c.storage[2], random.Random(0))
    st = node.status()
    assert st.first_index == c.storage[2].first_index()
    assert st.last_index == c.storage[2].last_index()
    c.nodes[2] = node
    c.nodes[1].propose(b"next")
    c.stabilize()
    assert node.raft.log.applied == c.nodes[1].raft.log.applied


def test_learner_replicates_but_does_not_vote_then_is_promoted() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].propose(b"before")
    c.stabilize()
    c.add_node(4, ConfState())
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 4))
    c.stabilize()
    c.tick(3)
    assert c.nodes[1].raft.conf == ConfState((1, 2, 3), (4,))
    assert datas(c, 4) == datas(c, 1)
    assert not c.nodes[4].raft.promotable()
    c.tick(100)
    assert c.nodes[4].raft.role is Role.FOLLOWER  # learners never campaign
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.PROMOTE, 4))
    c.stabilize()
    assert all(c.nodes[i].raft.conf == ConfState((1, 2, 3, 4)) for i in (1, 2, 3, 4))
    # Quorum is now 3 of 4: with two voters down nothing commits.
    c.isolate(3)
    c.isolate(4)
    idx = c.nodes[1].propose(b"needs three")
    c.stabilize()
    assert c.nodes[1].raft.log.committed < idx
    c.heal()
    c.tick(2)
    assert c.nodes[1].raft.log.committed >= idx


def test_only_one_membership_change_at_a_time() -> None:
    c = Cluster(3)
    c.elect(1)
    c.add_node(4, ConfState())
    c.add_node(5, ConfState())
    c.isolate(2)
    c.isolate(3)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 4))
    with pytest.raises(ConfChangeInProgress):
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 5))


def test_no_membership_change_before_the_leader_commits_its_term() -> None:
    c = Cluster(3)
    c.nodes[2].campaign()
    # Deliver the vote exchange, but cut the new leader off before its no-op can commit.
    while c.nodes[2].raft.role is not Role.LEADER:
        for i in c.ids:
            c.process(i)
        c.deliver()
    c.isolate(2)
    with pytest.raises(ConfChangeInProgress):
        c.nodes[2].propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 3))
    c.heal()
    c.stabilize()
    c.nodes[2].propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 3))


def test_invalid_membership_changes_are_refused() -> None:
    c = Cluster(3)
    c.elect(1)
    with pytest.raises(RaftError):
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.PROMOTE, 9))
    with pytest.raises(RaftError):
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 2))
    with pytest.raises(RaftError):
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 9))


def test_removing_a_follower_shrinks_the_quorum() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 3))
    c.stabilize()
    assert c.nodes[1].raft.conf == ConfState((1, 2))
    assert 3 not in c.nodes[1].status().peers
    c.isolate(3)
    idx = c.nodes[1].propose(b"two of two")
    c.stabilize()
    assert c.nodes[1].raft.log.committed >= idx


def test_removed_leader_steps_down_and_the_rest_elect_a_successor() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 1))
    c.stabilize()
    assert c.nodes[1].raft.role is Role.FOLLOWER
    with pytest.raises(NotLeader):
        c.nodes[1].propose(b"x")
    c.isolate(1)
    c.tick(40)
    new = c.leader()
    assert new in (2, 3)
    assert c.nodes[new].raft.conf == ConfState((2, 3))
    c.nodes[new].propose(b"after removal")
    c.stabilize()
    assert datas(c, 2)[-1] == datas(c, 3)[-1] == b"after removal"


def test_conf_change_encoding_round_trips_and_rejects_garbage() -> None:
    cc = ConfChange(ConfChangeKind.PROMOTE, 12345)
    assert ConfChange.decode(cc.encode()) == cc
    with pytest.raises(ValueError):
        ConfChange.decode(b"\x01\x02")


def test_a_learner_is_promoted_only_once_caught_up() -> None:
    from raftlog.errors import LearnerNotReady

    c = Cluster(3)
    c.elect(1)
    c.add_node(4, ConfState())
    c.isolate(4)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 4))
    c.stabilize()
    with pytest.raises(LearnerNotReady):
        c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.PROMOTE, 4))
    c.heal()
    c.tick(3)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.PROMOTE, 4))
    c.stabilize()
    assert c.nodes[1].raft.conf.voters == (1, 2, 3, 4)


def lose_disk(c: Cluster, i: int, *, rejoin: bool = False) -> RawNode:
    """Node ``i`` loses its disk and comes back under its old id on an empty one (a founding
    member's storage for the leader's configuration), in rejoin mode with ``rejoin``."""
    st = MemoryStorage(c.nodes[1].raft.conf)
    c.storage[i] = st
    c.nodes[i] = RawNode(Config(i, rejoin=rejoin), st, random.Random(i))
    c.applied[i] = []
    return c.nodes[i]


def test_rejoining_node_catches_up_before_it_votes() -> None:
    c = Cluster(3)
    c.elect(1)
    c.propose_many(1, 5)
    n3 = lose_disk(c, 3, rejoin=True)
    # It refuses votes while rejoining, even for an up-to-date candidate.
    n3.step(Message(MsgType.VOTE, to=3, frm=2, term=1, index=99, log_term=1))
    rd = n3.ready()
    assert [m.reject for m in rd.persisted_messages if m.type is MsgType.VOTE_RESP] == [True]
    n3.advance(rd)
    # The leader's heartbeat names a commit index beyond its log: it asks to be re-probed
    # instead of failing, and the leader sends it what it lost.
    c.tick(3)
    assert n3.raft.log.last_index() == c.nodes[1].raft.log.last_index()
    assert not n3.raft.rejoining
    assert [d for _, _, d in c.applied[3]] == [b"%d" % k for k in range(5)]


def test_a_lost_log_found_by_a_heartbeat_stops_voting_until_caught_up() -> None:
    """A node whose disk lost entries it acknowledged (wiped, or rolled back to an older copy)
    and that restarts without rejoin mode is caught by the first heartbeat: its commit index
    lies beyond the node's log. The node does not fail; it stops voting, asks the leader to
    re-probe it (`LOG_LOST`) and votes again once it holds that commit index."""
    c = Cluster(3)
    c.elect(1)
    c.propose_many(1, 3)
    committed = c.nodes[1].raft.log.committed
    lose_disk(c, 3)
    c.nodes[1].tick()  # a heartbeat round: it tells node 3 a commit index beyond its log
    c.process(1)
    c.deliver()
    c.process(3)
    n3 = c.nodes[3].raft
    assert n3.rejoining and not n3.promotable()
    assert any(m.type is MsgType.LOG_LOST for m in c.queue if m.frm == 3)
    c.stabilize()
    assert n3.log.last_index() >= committed
    assert not n3.rejoining and n3.promotable()


def test_an_answer_from_a_re_added_nodes_earlier_incarnation_is_ignored() -> None:
    """A node removed, wiped and re-added under the same id must not be credited with entries
    its earlier incarnation acknowledged: a late acknowledgement from the old incarnation would
    set the new progress's match, and heartbeats would then tell the new, empty node a commit
    index beyond its log. `Message.epoch` tells the two records apart."""
    c = Cluster(4, voters=[1, 2, 3])
    c.elect(1)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 4))
    c.stabilize()
    c.propose_many(1, 5, b"e")
    leader = c.nodes[1].raft
    assert leader.progress[4].match == leader.log.last_index()
    # The old incarnation's acknowledgement of everything, still in flight.
    c.nodes[1].propose(b"late")
    c.process(1)
    c.deliver()
    c.process(4)
    stale = [m for m in c.queue if m.frm == 4 and m.type is MsgType.APP_RESP]
    assert stale and stale[-1].index == leader.log.last_index()
    c.queue = [m for m in c.queue if m.frm != 4]
    c.stabilize()
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 4))
    c.stabilize()
    assert 4 not in leader.progress
    # Node 4 comes back with an empty disk and is added again.
    c.add_node(4, ConfState())
    c.isolate(4)
    c.nodes[1].propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 4))
    c.stabilize()
    assert leader.progress[4].match == 0
    for m in stale:
        c.nodes[1].step(m)
    assert leader.progress[4].match == 0, "the old incarnation's answer was counted"
    c.heal()
    c.tick(5)
    assert c.nodes[4].raft.log.last_index() == leader.log.last_index()
