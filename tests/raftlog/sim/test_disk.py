"""SimDisk: unsynced writes are lost on a crash, a torn record ends recovery, replay semantics."""

from __future__ import annotations

import random

import pytest

from raftlog.core import ConfState, Entry, HardState, Snapshot, SnapshotMeta, bootstrap_snapshot
from raftlog.errors import InvariantViolation
from raftlog.sim import EntriesRecord, HardStateRecord, SimDisk, SnapshotRecord

CONF = ConfState((1, 2, 3))


class FixedRandom(random.Random):
    """A generator whose ``randint`` always returns ``value`` (clamped to the range)."""

    def __init__(self, value: int) -> None:
        super().__init__(0)
        self.value = value

    def randint(self, a: int, b: int) -> int:
        return max(a, min(b, self.value))


def ents(term: int, lo: int, hi: int) -> tuple[Entry, ...]:
    return tuple(Entry(term, i, data=b"%d/%d" % (term, i)) for i in range(lo, hi + 1))


def founded() -> SimDisk:
    return SimDisk(bootstrap_snapshot(CONF))


def test_synced_records_survive_and_unsynced_ones_are_lost() -> None:
    d = founded()
    d.write([EntriesRecord(ents(1, 2, 4)), HardStateRecord(HardState(1, 1, 3))])
    d.sync()
    d.write([EntriesRecord(ents(1, 5, 6)), HardStateRecord(HardState(2, 2, 5))])
    out = d.crash(FixedRandom(0), torn_probability=0.0)
    assert (out.kept, out.lost, out.torn) == (0, 2, False)
    st, rec = d.recover()
    assert (rec.replayed, rec.dropped) == (0, 0)
    assert st.last_index() == 4
    assert st.initial_state() == (HardState(1, 1, 3), CONF)
    assert [e.data for e in st.entries(2, 5, 1 << 20)] == [b"1/2", b"1/3", b"1/4"]


def test_crash_keeps_a_prefix_of_unsynced_records() -> None:
    d = founded()
    d.write([EntriesRecord(ents(1, 2, 3))])
    d.write([EntriesRecord(ents(1, 4, 5))])
    d.write([HardStateRecord(HardState(1, 0, 5))])
    out = d.crash(FixedRandom(2), torn_probability=0.0)
    assert (out.kept, out.lost) == (2, 1)
    st, _ = d.recover()
    assert st.last_index() == 5
    assert st.initial_state()[0] == HardState()  # the hard state record was lost
    # What recovery replayed is durable now: a second crash cannot lose it.
    d.crash(FixedRandom(0), torn_probability=1.0)
    assert d.recover()[0].last_index() == 5


def test_torn_record_and_everything_after_it_are_dropped() -> None:
    d = founded()
    d.write([EntriesRecord(ents(1, 2, 3))])
    d.sync()
    d.write([EntriesRecord(ents(1, 4, 5)), EntriesRecord(ents(1, 6, 7))])
    out = d.crash(FixedRandom(1), torn_probability=1.0)
    assert (out.kept, out.torn) == (1, True)
    st, rec = d.recover()
    assert (rec.replayed, rec.dropped) == (1, 1)
    assert st.last_index() == 5

    d.write([EntriesRecord(ents(1, 6, 7)), EntriesRecord(ents(1, 8, 9))])
    d.write([EntriesRecord(ents(1, 10, 10))])
    d.crash(FixedRandom(3), torn_probability=0.0)
    d.tear(0)  # damage *before* the tail: the records after it must not be replayed either
    st, rec = d.recover()
    assert (rec.replayed, rec.dropped) == (0, 3)
    assert st.last_index() == 5


def test_entries_replace_the_suffix_from_their_first_index() -> None:
    d = founded()
    d.write([EntriesRecord(ents(1, 2, 6))])
    assert d.sync() is False
    d.write([EntriesRecord(ents(2, 4, 4))])
    assert d.sync() is True  # durable entries 4..6 were replaced
    assert [(e.index, e.term) for e in d.entries()] == [(2, 1), (3, 1), (4, 2)]
    assert d.holds(3, 1) and d.holds(4, 2)
    assert not d.holds(4, 1) and not d.holds(5, 1)
    with pytest.raises(InvariantViolation):
        d.write([EntriesRecord(ents(2, 9, 9))])
        d.sync()


def test_local_snapshot_compacts_and_installed_snapshot_replaces() -> None:
    d = founded()
    d.write([EntriesRecord(ents(1, 2, 8))])
    d.sync()
    local = Snapshot(SnapshotMeta(5, 1, CONF), b"s5")
    d.write([SnapshotRecord(local, install=False)])
    assert d.sync() is False
    assert d.snapshot() == local and d.last_index() == 8
    assert d.holds(3, 1)  # under the durable snapshot
    st = d.storage()
    assert st.first_index() == 6 and st.last_index() == 8 and st.snapshot() == local

    leader = Snapshot(SnapshotMeta(7, 3, ConfState((1, 2, 3, 4))), b"s7")
    d.write([SnapshotRecord(leader, install=True)])
    assert d.sync() is True  # entry 8 was dropped
    assert d.last_index() == 7 and not d.entries()
    assert d.storage().initial_state()[1] == ConfState((1, 2, 3, 4))
    d.write([SnapshotRecord(local, install=True)])  # older than the current one: ignored
    d.sync()
    assert d.snapshot() == leader


def test_joining_node_starts_empty() -> None:
    d = SimDisk()
    st = d.storage()
    assert st.last_index() == 0 and st.initial_state() == (HardState(), ConfState())
    assert not d.holds(1, 1)


def test_crashed_disk_refuses_writes_until_recovered() -> None:
    d = founded()
    d.crash(random.Random(1), torn_probability=0.5)
    with pytest.raises(InvariantViolation):
        d.write([HardStateRecord(HardState(1, 1, 0))])
    d.recover()
    d.write([HardStateRecord(HardState(1, 1, 0))])
