"""The rollback guard (`raftlog.core.recovery`): a restarted node recovers before it votes."""

from __future__ import annotations

import copy
import random

from raftlog.core import Config, MemoryStorage, MsgType, RawNode, Role, UnsafeHooks
from raftlog.core.types import Message
from tests.raftlog.core.harness import Cluster


def restart(c: Cluster, i: int, storage: MemoryStorage | None = None, **unsafe: bool) -> RawNode:
    """Start node ``i`` again from its durable storage (or from ``storage``: a rollback)."""
    if storage is not None:
        c.storage[i] = storage
    cfg = Config(i, check_quorum=c.check_quorum, unsafe=UnsafeHooks(**unsafe))
    c.nodes[i] = RawNode(cfg, c.storage[i], random.Random(c.seed * 1000 + i))
    return c.nodes[i]


def vote_request(to: int, frm: int, term: int, index: int, log_term: int) -> Message:
    return Message(MsgType.VOTE, to=to, frm=frm, term=term, index=index, log_term=log_term)


def granted(c: Cluster, node: int, m: Message) -> bool:
    """Whether ``node`` grants the vote request (the clusters here run without check-quorum,
    whose leader lease would make a follower ignore it)."""
    c.queue = []
    c.nodes[node].step(m)
    c.process(node)
    answers = [x for x in c.queue if x.type is MsgType.VOTE_RESP and x.frm == node]
    c.queue = []
    return bool(answers) and not answers[-1].reject


def test_a_fresh_node_has_nothing_to_recover() -> None:
    c = Cluster(3)
    assert not any(n.raft.recovering for n in c.nodes.values())
    c.elect(1)
    assert c.nodes[1].raft.role is Role.LEADER


def test_an_ordinary_restart_with_its_peers_up_costs_one_round_trip() -> None:
    c = Cluster(3)
    c.elect(1)
    c.nodes[1].propose(b"x")
    c.stabilize()
    n3 = restart(c, 3).raft
    assert n3.recovering and not n3.promotable()
    c.tick(1)  # asks both peers; their answers arrive in the same round trip
    assert not n3.recovering
    assert n3.promotable()


def test_a_restarted_node_neither_votes_nor_campaigns_until_enough_peers_answered() -> None:
    c = Cluster(3, check_quorum=False)
    c.elect(1)
    c.stabilize()
    term = c.nodes[1].raft.term
    n3 = restart(c, 3).raft
    c.isolate(1)  # one of the two answers it needs cannot arrive
    c.tick(3)
    assert n3.recovering
    assert not granted(c, 3, vote_request(3, 2, term + 5, 100, term))
    c.heal()
    c.tick(1)  # the next ask (every heartbeat interval) reaches node 1 too
    assert not n3.recovering


def test_after_recovery_no_vote_in_the_highest_term_answered() -> None:
    """It may have voted in that term before its disk was rolled back."""
    c = Cluster(3, check_quorum=False)
    c.elect(1)
    c.stabilize()
    backup = copy.deepcopy(c.storage[3])
    c.isolate(1)
    c.nodes[2].campaign()  # 2 and 3 elect 2 in a later term: 3 votes for 2
    c.stabilize()
    assert c.nodes[2].raft.role is Role.LEADER
    term = c.nodes[2].raft.term
    c.heal()
    restart(c, 3, backup)  # 3 forgot that vote (and the term)
    c.tick(1)
    n3 = c.nodes[3].raft
    assert not n3.recovering and n3.term == term
    assert not granted(c, 3, vote_request(3, 1, term, 1000, term))
    assert granted(c, 3, vote_request(3, 1, term + 1, 1000, term))


def rolled_past() -> tuple[Cluster, MemoryStorage]:
    """A three-node cluster led by 1 and a copy of node 3's storage from before the five
    entries every node then acknowledged."""
    c = Cluster(3, check_quorum=False)
    c.elect(1)
    backup = copy.deepcopy(c.storage[3])
    c.propose_many(1, 5)
    return c, backup


def test_a_rolled_back_node_refuses_a_candidate_below_what_its_peers_hold() -> None:
    c, backup = rolled_past()
    leader_last = c.nodes[1].raft.log.last_index()
    old = c.nodes[2].raft.log.last_index() - 5  # what 2 would hold had it missed the five
    term = c.nodes[1].raft.term
    n3 = restart(c, 3, backup).raft
    c.tick(1)
    assert not n3.recovering and n3.log_floor == (term, leader_last)
    # A candidate lacking the five entries 3 had acknowledged is refused; one holding them not.
    assert not granted(c, 3, vote_request(3, 2, term + 1, old, term))
    assert granted(c, 3, vote_request(3, 2, term + 1, leader_last, term))


def test_without_the_guard_the_same_node_elects_a_leader_lacking_acknowledged_entries() -> None:
    """The planted bug the simulator catches (`UnsafeHooks.skip_recovery`), shown directly."""
    c, backup = rolled_past()
    term = c.nodes[1].raft.term
    n3 = restart(c, 3, backup, skip_recovery=True).raft
    # A candidate as up to date as the old copy, lacking the five entries: granted.
    assert granted(c, 3, vote_request(3, 2, term + 1, n3.log.last_index(), term))


def test_a_floor_nobody_holds_any_more_is_refreshed() -> None:
    """The node whose log set the floor lost its tail since: asking again clears it."""
    c = Cluster(3)
    c.elect(1)
    c.stabilize()
    n3 = c.nodes[3].raft
    n3.log_floor = (n3.term, n3.log.last_index() + 50)  # as if learned from a lost tail
    c.isolate(1)
    c.tick(60)
    assert n3.log_floor == (0, 0)
    assert c.leader() in (2, 3)
