"""Fair queues in the queue machine (`cmq.fsm.tenants`): on a standard queue a message's group id
names its tenant; a `Lease` takes round-robin over the tenants with a ready message, in name
order after the replicated cursor, seq order within a tenant; tenants survive copy-forward, a
restore and a replayed log (image version 6); a Hypothesis state machine against a model."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from pyroaring import BitMap64

from cmq import errors
from cmq.fsm import (
    Ack,
    CreateQueue,
    Lease,
    MemorySegmentStore,
    Nack,
    NewMessage,
    Produce,
    QueueMachine,
    Tidy,
)
from cmq.fsm.commands import CommandFailed, Leased, Tidied
from cmq.model import QueueAttributes

from .harness import leased, sent
from .stateful import T0, VIS, ReadyIndexRules, TwinQueueModel


def machine(priorities: int = 1, **kw: object) -> QueueMachine:
    m = QueueMachine(MemorySegmentStore(indexes=True))
    attrs = QueueAttributes(visibility_timeout=30, priorities=priorities)
    assert m.execute(CreateQueue("q", attrs, T0, **kw)) is not None  # type: ignore[arg-type]
    return m


def msg(i: int, tenant: str | None, priority: int = 0, delay: int | None = None) -> NewMessage:
    return NewMessage(f"m{i}", b"x", False, (), delay, None, tenant, None, priority)


def send(m: QueueMachine, now: int, *tenants: str | None) -> list[int]:
    return sent(m.execute, "q", now, (msg(now * 100 + i, t) for i, t in enumerate(tenants)))


def lease(m: QueueMachine, now: int, n: int = 10) -> list[int]:
    return [x.seq for x in leased(m.execute, "q", now, n, VIS).messages]


def test_a_receive_takes_round_robin_over_tenants_so_a_backlog_does_not_starve_the_others() -> None:
    m = machine()
    big = send(m, T0, *(["a"] * 50))
    b = send(m, T0 + 1, "b", "b")
    none = send(m, T0 + 2, None)
    # Name order: "" (no group id), a, b; then around again.
    assert lease(m, T0 + 3, 5) == [none[0], big[0], b[0], big[1], b[1]]
    # The cursor is at b: the next receive starts after it (with "" gone, at a).
    assert lease(m, T0 + 4, 3) == big[2:5]
    assert m.fifo_ids("q", [big[0], none[0]]) == {big[0]: ("a", "")}


def test_the_cursor_is_replicated_so_consecutive_single_receives_alternate() -> None:
    m = machine()
    a = send(m, T0, "a", "a", "a")
    b = send(m, T0 + 1, "b", "b", "b")
    got = [lease(m, T0 + 2 + i, 1)[0] for i in range(4)]
    assert got == [a[0], b[0], a[1], b[1]]


def test_levels_above_zero_stay_strict_and_a_tenant_with_a_priority_is_refused() -> None:
    m = machine(priorities=3)
    out = m.execute(Produce("q", T0, (msg(1, None, 0), msg(2, None, 2), msg(3, "a", 0))))
    assert not isinstance(out, CommandFailed)
    low, high, a = (seq for _, seq in out.messages)  # type: ignore[union-attr]
    assert lease(m, T0 + 1, 10) == [high, low, a]
    refused = m.execute(Produce("q", T0 + 2, (msg(4, "a", 1),)))
    assert isinstance(refused, CommandFailed) and refused.code == errors.InvalidParameter.code
    empty = m.execute(Produce("q", T0 + 2, (msg(5, "", 0),)))
    assert isinstance(empty, CommandFailed)
    stats = m.stats("q", T0 + 2)
    assert stats is not None and stats.sent_total == 3


def test_a_queue_without_group_ids_has_no_tenant_index_and_writes_older_images() -> None:
    m = machine()
    send(m, T0, None, None)
    q = m._queues["q"]
    assert q.ready.tenants is None
    assert m.encode_image()[4] < 6
    send(m, T0 + 1, "a")
    assert q.ready.tenants is not None and m.encode_image()[4] == 7


def test_tenants_survive_a_restore_and_equal_a_replayed_log_in_image_version_6() -> None:
    m, twin = machine(), machine()
    for target in (m, twin):
        send(target, T0, "b", "a", None, "a", "c")
        lease(target, T0 + 1, 2)
    m.restore(2, m.snapshot())
    assert m.encode_image(reuse=False) == twin.encode_image(reuse=False)
    for target in (m, twin):
        send(target, T0 + 2, "b")
    assert lease(m, T0 + 3, 10) == lease(twin, T0 + 3, 10)


def test_a_message_copied_forward_keeps_its_tenant() -> None:
    m = machine(segment_bytes=600, segment_age_ms=3_600_000)
    seqs = send(m, T0, *([None] * 7), "t", *([None] * 24))
    taken = lease(m, T0 + 1, 32)
    got = m.execute(Lease("q", T0 + 1, 0, VIS))
    assert isinstance(got, Leased)
    # Ack everything but the tenant's message, which comes back (nack) and is copied forward.
    leases = m.execute(Lease("q", T0 + 1 + VIS, 32, VIS))
    assert isinstance(leases, Leased)
    held = {x.seq: x.lease_id for x in leases.messages}
    assert set(held) == set(taken)
    m.execute(Nack("q", T0 + 2 + VIS, ((seqs[7], held[seqs[7]]),), 0))
    m.execute(Ack("q", T0 + 2 + VIS, tuple((s, held[s]) for s in seqs[:16] if s != seqs[7])))
    tidied = m.execute(Tidy("q", T0 + 3 + VIS))
    assert isinstance(tidied, Tidied) and tidied.copied >= 1
    (first,) = m.peek("q", 1)
    assert first.id == f"m{T0 * 100 + 7}" and first.seq != seqs[7]
    assert m.fifo_ids("q", [first.seq]) == {first.seq: ("t", "")}
    assert lease(m, T0 + 4 + VIS, 1) == [first.seq]


class FairQueueModel(TwinQueueModel):
    """A standard queue with tenants (and 2 priority levels) against a model: which messages a
    receive gets (level 1 first in seq order; then round-robin over the tenants with a ready
    level-0 message, name order after the cursor, seq order within), acks, nacks, leases running
    out, delays; a replica that restores from snapshots and one that applies every command agree
    byte for byte and lease alike."""

    def __init__(self) -> None:
        super().__init__(machine(priorities=2), machine(priorities=2))
        self.tenant: dict[int, str] = {}  # live seq -> tenant ("" for none)
        self.high: set[int] = set()  # live seqs at level 1 (no tenant)
        self.cursor: str | None = None

    def acked(self, seq: int) -> None:
        del self.tenant[seq]
        self.high.discard(seq)

    @rule(
        tenants=st.lists(st.sampled_from([None, "a", "b", "c", "!high"]), min_size=1, max_size=5),
        delay=st.sampled_from([None, 0, 5_000]),
    )
    def send(self, tenants: list[str | None], delay: int | None) -> None:
        msgs = tuple(
            msg(self.now * 100 + i, None, 1, delay)
            if t == "!high"
            else msg(self.now * 100 + i, t, 0, delay)
            for i, t in enumerate(tenants)
        )
        self.now += 1
        out = self.run(Produce("q", self.now, msgs))
        assert not isinstance(out, CommandFailed)
        for (_, seq), t in zip(out.messages, tenants, strict=True):  # type: ignore[union-attr]
            if t == "!high":
                self.high.add(seq)
            elif t is not None and not any(self.tenant.values()):
                self.cursor = None  # a named tenant appears while none is live
            self.tenant[seq] = "" if t in {None, "!high"} else str(t)
            self.visible_at[seq] = self.now + (delay or 0)

    @rule(n=st.integers(1, 6))
    def receive(self, n: int) -> None:
        ready = {s for s in self.tenant if self.visible_at[s] <= self.now}
        want = sorted(s for s in ready if s in self.high)[:n]
        ready -= set(want)
        for _ in range(n - len(want)):
            active = sorted({self.tenant[s] for s in ready})
            if not active:
                break
            after = [t for t in active if self.cursor is None or t > self.cursor]
            pick = (after or active)[0]
            self.cursor = pick
            seq = min(s for s in ready if self.tenant[s] == pick)
            ready.discard(seq)
            want.append(seq)
        got = self.run(Lease("q", self.now, n, VIS))
        assert isinstance(got, Leased)
        assert [x.seq for x in got.messages] == want
        for x in got.messages:
            self.leases[x.seq] = x.lease_id
            self.visible_at[x.seq] = self.now + VIS

    @invariant()
    def tenants_read_back(self) -> None:
        named = {s: (t, "") for s, t in self.tenant.items() if t}
        assert self.m.fifo_ids("q", list(self.tenant)) == named


TestFairQueueModel = FairQueueModel.TestCase
TestFairQueueModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


class TenantReadyIndexModel(ReadyIndexRules):
    """`ReadyIndex` with tenants (and levels) against dicts: each live seq's tenant and level,
    readiness; the per-tenant ready sets, the active tenants and `pick` (the cursor) agree
    through deletes, deletes below a seq, moves (copy-forward) and bulk readiness."""

    def __init__(self) -> None:
        super().__init__()
        self.tenant: dict[int, str] = {}
        self.cursor: str | None = None

    def forget(self, seq: int) -> None:
        super().forget(seq)
        del self.tenant[seq]

    def moved(self, old: int, new: int) -> None:
        self.tenant[new] = self.tenant.pop(old)
        super().moved(old, new)

    @rule(tenant=st.sampled_from(["", "", "a", "b", "c"]), level=st.sampled_from([0, 0, 0, 2]))
    def add_message(self, tenant: str, level: int) -> None:
        seq = self.next
        self.next += 1
        if level:
            tenant = ""
            self.index.set_level(seq, level)
        elif tenant:
            if not any(self.tenant.values()):
                self.cursor = None
            self.index.set_tenant(seq, tenant)
        self.tenant[seq], self.level[seq] = tenant, level

    @rule()
    def all_ready(self) -> None:
        self.index.update(BitMap64(sorted(self.tenant)))
        self.ready = set(self.tenant)

    @rule()
    def pick(self) -> None:
        if not self.ready:
            return
        high = [s for s in self.ready if self.level[s]]
        if high:
            want = min(high)
        else:
            active = sorted({self.tenant[s] for s in self.ready})
            after = [t for t in active if self.cursor is None or t > self.cursor]
            self.cursor = (after or active)[0]
            want = min(s for s in self.ready if self.tenant[s] == self.cursor)
        assert self.index.first() == want
        assert self.index.pick() == want
        self.index.remove(want)
        self.ready.discard(want)

    @invariant()
    def agrees(self) -> None:
        assert set(self.index.all) == self.ready
        tenants = self.index.tenants
        if tenants is None:
            assert not any(self.tenant.values())
            return
        by: dict[str, set[int]] = {}
        for seq in self.ready:
            by.setdefault(self.tenant[seq], set()).add(seq)
        assert {t: set(b) for t, b in tenants.ready_by.items()} == by
        assert tenants.active == sorted(by)
        assert tenants.of == {s: t for s, t in self.tenant.items() if t}
        assert {t: set(b) for t, b in tenants.members.items()} == {
            t: {s for s, x in self.tenant.items() if x == t} for t in set(tenants.of.values())
        }


TestTenantReadyIndexModel = TenantReadyIndexModel.TestCase
TestTenantReadyIndexModel.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None
)
