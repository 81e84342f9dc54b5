"""The checker flags each kind of broken invariant it is fed (the simulator feeds it real runs)."""

from __future__ import annotations

import random

import pytest

from raftlog.core import (
    ConfChange,
    ConfChangeKind,
    Config,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    MemoryStorage,
    RawNode,
)
from raftlog.sim import Ack, Checker, SafetyViolation, chain_digest
from raftlog.sim.node import GENESIS

CONF = ConfState((1, 2, 3))


def checker(durable: set[tuple[int, int, int, int]] | None = None) -> Checker:
    held = durable if durable is not None else set()
    return Checker({1: CONF}, lambda n, g, i, t: (n, g, i, t) in held, lambda n, g: 0)


def leader(node: int, *, term: int = 0) -> RawNode:
    """A single-voter node that wins its own election in ``term + 1`` (a leader to show)."""
    st = MemoryStorage(ConfState((node,)))
    st.set_hard_state(HardState(term=term))
    raw = RawNode(Config(node), st, random.Random(node))
    raw.campaign()
    return raw


def test_two_leaders_in_one_term_break_election_safety() -> None:
    c = checker()
    a, b = leader(1), leader(2)
    assert a.raft.term == b.raft.term
    c.observe(1, 1, a.raft)
    c.observe(1, 1, a.raft)  # the same leader seen again is fine
    with pytest.raises(SafetyViolation) as exc:
        c.observe(1, 2, b.raft)
    assert exc.value.check == "election-safety"


def test_conflicting_entries_at_one_index_and_term_break_log_matching() -> None:
    c = checker()
    c.on_entries(1, 1, [Entry(2, 5, data=b"a"), Entry(2, 6, data=b"b")], prev_term=1)
    c.on_entries(1, 2, [Entry(2, 6, data=b"b")], prev_term=2)  # same entry elsewhere: fine
    with pytest.raises(SafetyViolation) as exc:
        c.on_entries(1, 3, [Entry(2, 6, data=b"x")], prev_term=2)
    assert exc.value.check == "log-matching"
    with pytest.raises(SafetyViolation):
        c.on_entries(1, 3, [Entry(2, 5, data=b"a")], prev_term=3)  # different predecessor


def test_different_applies_at_one_index_break_state_machine_safety() -> None:
    c = checker()
    e = Entry(1, 2, data=b"a")
    c.on_apply(1, 1, e, chain_digest(GENESIS, e))
    c.on_apply(1, 2, e, chain_digest(GENESIS, e))
    other = Entry(1, 2, data=b"b")
    with pytest.raises(SafetyViolation) as exc:
        c.on_apply(1, 3, other, chain_digest(GENESIS, other))
    assert exc.value.check == "state-machine-safety"
    with pytest.raises(SafetyViolation):
        c.on_restore(1, 3, 2, 1, GENESIS)  # a snapshot claiming another state at index 2


def test_acknowledged_entry_on_a_minority_breaks_durability() -> None:
    durable = {(1, 1, 2, 1)}
    c = checker(durable)
    with pytest.raises(SafetyViolation) as exc:
        c.on_ack(Ack(1, 2, 1, b"a", max_term=1))
    assert exc.value.check == "durability"
    durable.add((2, 1, 3, 1))
    durable.add((1, 1, 3, 1))
    c.on_ack(Ack(1, 3, 1, b"b", max_term=1))  # two of three voters hold it
    durable.discard((2, 1, 3, 1))
    with pytest.raises(SafetyViolation):
        c.check_durability(1)  # a later truncation lost a copy


def test_membership_change_is_tracked_for_durability() -> None:
    c = checker({(1, 1, 3, 1), (2, 1, 3, 1)})
    c.on_ack(Ack(1, 3, 1, b"x", max_term=1))
    add = Entry(1, 4, EntryKind.CONF, ConfChange(ConfChangeKind.ADD_LEARNER, 4).encode())
    c.on_apply(1, 1, add, b"d4")
    assert c.conf(1) == ConfState((1, 2, 3), (4,))
    promote = Entry(1, 5, EntryKind.CONF, ConfChange(ConfChangeKind.PROMOTE, 4).encode())
    c.on_apply(1, 1, promote, b"d5")  # voters {1,2,3,4}: the two holders still suffice
    remove = Entry(1, 6, EntryKind.CONF, ConfChange(ConfChangeKind.REMOVE, 2).encode())
    with pytest.raises(SafetyViolation):  # voters {1, 3, 4}: only node 1 holds entry 3
        c.on_apply(1, 1, remove, b"d6")


def test_new_leader_lacking_an_acknowledged_entry_breaks_completeness() -> None:
    c = checker({(1, 1, 2, 1), (2, 1, 2, 1)})
    c.on_ack(Ack(1, 2, 1, b"a", max_term=1))
    late = leader(3, term=1)  # term 2, its log holds only its own no-op at 2
    assert late.raft.term == 2 and late.raft.log.term(2) == 2
    with pytest.raises(SafetyViolation) as exc:
        c.observe(1, 3, late.raft)
    assert exc.value.check == "leader-completeness"
