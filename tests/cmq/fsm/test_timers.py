"""The bucketed timer index (`cmq.fsm.timers`) against a plain reference (a dict seq -> time),
and the machine with long delays against the reference rules of visibility."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from cmq.fsm import CreateQueue, Lease, MemorySegmentStore, NewMessage, Produce, QueueMachine
from cmq.fsm.commands import CommandFailed, Leased, Nack
from cmq.fsm.timers import BUCKET_SHIFT, TimerIndex
from cmq.model import QueueAttributes

DAY = 86_400_000
T0 = 1_700_000_000_000

ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, 40), st.integers(0, 3 * DAY)),
        st.tuples(st.just("drop"), st.integers(0, 40), st.just(0)),
        st.tuples(st.just("tick"), st.just(0), st.integers(0, DAY // 2)),
        st.tuples(st.just("peek"), st.just(0), st.just(0)),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_the_index_fires_as_a_dict_of_current_times(history: list[tuple[str, int, int]]) -> None:
    """Setting, replacing and dropping timers, then moving time: each timer fires exactly when
    the time reaches its current value, never a superseded one; `earliest` is the least."""
    index = TimerIndex()
    current: dict[int, int] = {}  # the reference: seq -> time

    def valid(seq: int, at: int) -> bool:
        return current.get(seq) == at

    now = 0
    fired: list[int] = []
    for op, seq, value in history:
        if op == "set":
            at = now + value
            if at <= now:
                current.pop(seq, None)
                continue
            current[seq] = at
            index.add(seq, at)
            if len(index) > 2 * len(current) + 8:
                index.compact(valid)
        elif op == "drop":
            current.pop(seq, None)
        elif op == "tick":
            now += value
            due = sorted(s for s, at in current.items() if at <= now)
            got = []
            for s in index.pop_due(now, valid):
                got.append(s)
                del current[s]  # fired: no longer a timer (as `ready` makes it)
            assert sorted(got) == due
            fired.extend(got)
        else:
            assert index.earliest(valid) == min(current.values(), default=None)
    assert len(index) >= len(current)


def test_superseded_entries_are_compacted() -> None:
    index = TimerIndex()
    current: dict[int, int] = {}

    def valid(seq: int, at: int) -> bool:
        return current.get(seq) == at

    for i in range(100_000):
        current[i % 10] = 10_000_000 + i
        index.add(i % 10, 10_000_000 + i)
        if len(index) > 2 * len(current) + 1024:
            index.compact(valid)
    assert len(index) <= 1044
    assert index.earliest(valid) == min(current.values())


def test_buckets_are_coarse() -> None:
    index = TimerIndex()
    for seq in range(1000):
        index.add(seq, DAY + seq * 1000)  # 1000 s: about 16 buckets
    assert len(index.buckets) <= 1000 * 1000 // (1 << BUCKET_SHIFT) + 2
    assert not index.near


def test_long_delays_are_delivered_exactly_on_time() -> None:
    """Messages delayed up to 7 days, some with a time to live, nacked with long delays,
    through the machine: a lease at any time gets exactly the messages the reference rules
    give (visible once their time has come, never once their time to live ran out), and the
    same after a restore."""
    rng = random.Random(7)
    m = QueueMachine(MemorySegmentStore(indexes=True))
    attrs = QueueAttributes(visibility_timeout=30, max_delay_seconds=604_800)
    m.execute(CreateQueue("q", attrs, T0))
    due_at: dict[int, int] = {}
    gone_at: dict[int, int] = {}
    now = T0
    for b in range(20):
        msgs = tuple(
            NewMessage(
                f"m{b}-{i}",
                b"x",
                False,
                (),
                rng.randint(0, 7 * DAY),
                None,
                None,
                rng.choice([None, None, rng.randint(1, 3 * DAY)]),
            )
            for i in range(50)
        )
        out = m.execute(Produce("q", now, msgs))
        for (_, seq), msg in zip(out.messages, msgs, strict=True):  # type: ignore[union-attr]
            assert msg.delay_ms is not None
            due_at[seq] = now + msg.delay_ms
            if msg.ttl_ms is not None:
                gone_at[seq] = now + msg.ttl_ms
        now += rng.randint(0, 3_600_000)
    for step in range(300):
        now += rng.randint(0, 3 * 3_600_000)
        if step == 150:
            m.restore(2, m.snapshot())
        for seq in [s for s, at in gone_at.items() if at <= now]:  # expired: never delivered
            del gone_at[seq]
            due_at.pop(seq, None)
        _check_untouched_counts(m, now + rng.randint(0, DAY))
        got = m.execute(Lease("q", now, 10, 30))
        assert isinstance(got, Leased)
        expected = sorted(s for s, at in due_at.items() if at <= now)[:10]
        assert sorted(lm.seq for lm in got.messages) == expected
        for lm in got.messages:
            if rng.random() < 0.5:
                delay = rng.randint(0, 2 * DAY)
                m.execute(Nack("q", now, ((lm.seq, lm.lease_id),), delay))
                due_at[lm.seq] = now + delay
            else:
                due_at[lm.seq] = now + 30_000  # its lease runs out
    stats = m.stats("q", now)
    assert stats is not None and stats.expired_total == sum(
        1 for i in range(1, 1001) if i not in due_at
    )


def test_a_delay_beyond_the_queues_max_delay_is_refused_whole() -> None:
    m = QueueMachine(MemorySegmentStore())
    m.execute(CreateQueue("q", QueueAttributes(max_delay_seconds=3600), T0))
    ok = NewMessage("a", b"x", False, (), 3_600_000, None)
    late = NewMessage("b", b"x", False, (), 3_600_001, None)
    refused = m.execute(Produce("q", T0, (ok, late)))
    assert isinstance(refused, CommandFailed) and "max_delay_seconds" in refused.message
    stats = m.stats("q", T0)
    assert stats is not None and stats.sent_total == 0
    assert not isinstance(m.execute(Produce("q", T0, (ok,))), CommandFailed)


def _check_untouched_counts(m: QueueMachine, probe: int) -> None:
    """`QueueState.untouched_timers` (bucket counts in C) agrees with the entry-by-entry
    reference (`pending_timers`, each entry checked by `timer_valid`)."""
    q = m._queues["q"]
    slot_of = q.touched.slot_of
    ref = [(s, at) for s, at in q.pending_timers() if s not in slot_of]
    due, later, first = q.untouched_timers(probe)
    assert sorted(due) == sorted(s for s, at in ref if at <= probe)
    assert later == sum(1 for _, at in ref if at > probe)
    assert first == min((at for _, at in ref if at > probe), default=None)
