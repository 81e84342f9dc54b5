"""Model-based test: `QueueMachine` (memory and file stores) against the reference `Model`.

Every command's result must equal the model's; after every step the per-queue stats match.
Also checked: no acked message is ever leased again, at most one unexpired lease per message,
FIFO order of first deliveries (for messages sent without a delay). A rule takes a snapshot;
another simulates a crash: a fresh machine restores the last snapshot over the same segment
bytes (truncating what was appended after it) and replays the commands since, which must
reproduce the same results and the same image. With a rewind retention
(`RewindQueueMachineTest`), rewinds too: acknowledged messages come back once, as the model
says, and the retained segments and rewound copies survive the crash (image version 6).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    Command,
    CommandFailed,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    EntryOutcomes,
    Expire,
    Lease,
    Leased,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    Result,
    Rewind,
    SetAttributes,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import FileSegmentStore, MemorySegmentStore
from cmq.fsm.store import SegmentStore
from cmq.model import QueueAttributes, SegmentCounts

from .harness import Applier
from .model import Model

NAMES = ("a", "b")
ATTRS = (
    QueueAttributes(),
    QueueAttributes(visibility_timeout=2, message_retention_seconds=60),
    QueueAttributes(visibility_timeout=1, dead_letter_queue="dlq", max_receive_count=2),
    QueueAttributes(visibility_timeout=0, dead_letter_queue="dlq", max_receive_count=1),
    QueueAttributes(delay_seconds=1, visibility_timeout=3),
)
times = st.integers(min_value=-500, max_value=4_000)
"""Time steps: mostly forward, sometimes backward (another leader's clock)."""
ACTIONS = (
    *("tick",) * 4,
    *("produce",) * 5,
    *("lease",) * 5,
    *("ack",) * 3,
    *("nack",) * 2,
    *("change_visibility",) * 2,
    "dead_letter",
    "dead_letter",
    "expire",
    "purge",
    "set_attributes",
    "create_rule",
    "delete",
    "snapshot",
    "snapshot",
    "crash_and_recover",
    "crash_and_recover",
)


def _outcomes(res: Result, entries: list[tuple[int, int]]) -> tuple[str | None, ...]:
    """Per-entry outcomes; a failed command (no such queue) counts as all failed."""
    return res.outcomes if isinstance(res, EntryOutcomes) else ("failed",) * len(entries)


class QueueMachineTest(RuleBasedStateMachine):
    store_kind = "memory"
    retain = 0
    """Every queue's ``retain_acked_seconds`` (rewinds are drawn only when above 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp: str | None = None
        self.store = self._new_store()
        self.machine = self._new_machine()
        self.apply = Applier(self.machine)
        self.model = Model()
        self.now = 1_000_000
        self.last_image = b""
        self.since: list[tuple[Command, Result]] = []
        # Test-side bookkeeping for the cross-cutting properties.
        self.leases: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self.acked: set[tuple[str, int]] = set()
        self.delayed: set[tuple[str, int]] = set()
        self.first_delivered: dict[str, int] = {}
        self.generation: dict[str, int] = {}

    def _new_store(self) -> SegmentStore:
        if self.store_kind == "memory":
            return MemorySegmentStore(cache_bytes=300)  # tiny: most reads go to the bytes
        if self.tmp is None:
            self.tmp = tempfile.mkdtemp(prefix="cmq-fsm-")
        return FileSegmentStore(self.tmp, cache_bytes=300, max_open=3)

    def _new_machine(self) -> QueueMachine:
        # Small segments so sealing and release happen often.
        return QueueMachine(self.store, segment_bytes=300, segment_age_ms=5_000)

    def teardown(self) -> None:
        if isinstance(self.store, FileSegmentStore):
            self.store.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- driving ---------------------------------------------------------------------------
    def run(self, cmd: Command) -> Result:
        expected = self.model.apply(cmd)
        got = self.apply(cmd)
        if isinstance(expected, CommandFailed):
            assert isinstance(got, CommandFailed) and got.code == expected.code
        else:
            assert got == expected, (cmd, got, expected)
        self.since.append((cmd, got))
        return got

    # -- rules -----------------------------------------------------------------------------
    # One weighted rule rather than one rule per command: Hypothesis's swarm testing would
    # otherwise switch off whole rules (e.g. produce) for most examples.
    @initialize(attrs=st.lists(st.sampled_from(ATTRS), min_size=len(NAMES), max_size=len(NAMES)))
    def create_all(self, attrs: list[QueueAttributes]) -> None:
        for name, a in zip(NAMES, attrs, strict=True):
            self.create(name, a)

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        action = data.draw(st.sampled_from(ACTIONS + (("rewind",) * 3 if self.retain else ())))
        name = data.draw(st.sampled_from(NAMES))
        getattr(self, action)(name, data)

    def tick(self, name: str, data: st.DataObject) -> None:
        self.now += data.draw(times)

    def create(self, name: str, attrs: QueueAttributes) -> None:
        if name not in self.model.queues:
            self.generation[name] = self.generation.get(name, 0) + 1
            self.first_delivered[name] = 0
        self.run(CreateQueue(name, replace(attrs, retain_acked_seconds=self.retain), self.now))

    def create_rule(self, name: str, data: st.DataObject) -> None:
        self.create(
            data.draw(st.sampled_from((name, "bad/name"))), data.draw(st.sampled_from(ATTRS))
        )

    def delete(self, name: str, data: st.DataObject) -> None:
        self.run(DeleteQueue(name))

    def set_attributes(self, name: str, data: st.DataObject) -> None:
        attrs = data.draw(st.sampled_from(ATTRS))
        self.run(SetAttributes(name, replace(attrs, retain_acked_seconds=self.retain)))

    def rewind(self, name: str, data: st.DataObject) -> None:
        since = self.now - data.draw(st.integers(0, 60_000))
        start = data.draw(st.one_of(st.just(0), st.integers(0, 30)))
        self.run(Rewind(name, self.now, since, start, data.draw(st.integers(1, 5))))

    def purge(self, name: str, data: st.DataObject) -> None:
        self.run(Purge(name, self.now))

    def produce(self, name: str, data: st.DataObject) -> None:
        msgs = data.draw(
            st.lists(
                st.tuples(
                    st.binary(max_size=40),
                    st.one_of(st.none(), st.just(0), st.integers(1, 3000)),
                    st.one_of(st.none(), st.sampled_from(("x", "y", "z"))),
                ),
                min_size=1,
                max_size=5,
            )
        )
        news = tuple(
            NewMessage(f"m{self.apply.index}-{i}", body, i % 2 == 1, (("k", "v"),), d, dd)
            for i, (body, d, dd) in enumerate(msgs)
        )
        res = self.run(Produce(name, self.now, news))
        q = self.model.queues.get(name)
        if q is None or not isinstance(res, Produced):
            return
        for (_, seq), m in zip(res.messages, news, strict=True):
            delay = q.attributes.delay_seconds if m.delay_ms is None else m.delay_ms
            if delay:
                self.delayed.add((self._gen(name), seq))

    def _gen(self, name: str) -> str:
        return f"{name}#{self.generation.get(name, 0)}"

    def lease(self, name: str, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, 4))
        vis = data.draw(st.one_of(st.none(), st.just(0), st.integers(1, 5000)))
        res = self.run(Lease(name, self.now, n, vis))
        if not isinstance(res, Leased):
            return
        q = self.model.queues[name]
        g = self._gen(name)
        for m in res.messages:
            assert (g, m.seq) not in self.acked, "an acked message was leased again"
            for _, deadline in self.leases.get((g, m.seq), []):
                assert deadline <= q.clock, "two unexpired leases on one message"
            self.leases[(g, m.seq)] = [(m.lease_id, q.msgs[m.seq].visible_at)]
            if m.receive_count == 1 and (g, m.seq) not in self.delayed:
                assert m.seq > self.first_delivered.get(name, 0), "first deliveries out of order"
                self.first_delivered[name] = m.seq

    def _entries(self, name: str, data: st.DataObject) -> list[tuple[int, int]]:
        g = self._gen(name)
        known = [(k[1], lid) for k, v in self.leases.items() if k[0] == g for lid, _ in v]
        pool = st.sampled_from(known) if known else st.nothing()
        junk = st.tuples(st.integers(0, 12), st.integers(0, 12))
        return data.draw(st.lists(st.one_of(pool, pool, junk), max_size=4))

    def ack(self, name: str, data: st.DataObject) -> None:
        entries = self._entries(name, data)
        res = self.run(Ack(name, self.now, tuple(entries)))
        for (seq, _), code in zip(entries, _outcomes(res, entries), strict=True):
            if code is None:
                self.acked.add((self._gen(name), seq))

    def change_visibility(self, name: str, data: st.DataObject) -> None:
        entries = self._entries(name, data)
        vis = data.draw(st.integers(0, 5000))
        res = self.run(ChangeVisibility(name, self.now, tuple((s, lid, vis) for s, lid in entries)))
        q = self.model.queues.get(name)
        for (seq, lid), code in zip(entries, _outcomes(res, entries), strict=True):
            if code is None and q is not None:
                self.leases[(self._gen(name), seq)] = [(lid, q.msgs[seq].visible_at)]

    def nack(self, name: str, data: st.DataObject) -> None:
        entries = self._entries(name, data)
        res = self.run(Nack(name, self.now, tuple(entries), data.draw(st.integers(0, 3000))))
        for (seq, _), code in zip(entries, _outcomes(res, entries), strict=True):
            if code is None:
                self.leases.pop((self._gen(name), seq), None)

    def dead_letter(self, name: str, data: st.DataObject) -> None:
        extra = data.draw(st.lists(st.integers(0, 12), max_size=2))
        seqs = self.machine.pending_dead_letters(name) + extra
        self.run(DeadLetter(name, tuple(seqs)))

    def expire(self, name: str, data: st.DataObject) -> None:
        self.now += data.draw(st.sampled_from((0, 1000, 59_000, 70_000)))
        self.run(Expire(name, self.now))

    def snapshot(self, name: str, data: st.DataObject) -> None:
        self.last_image = self.machine.snapshot()
        self.since = []

    def crash_and_recover(self, name: str, data: st.DataObject) -> None:
        """Restart from the last snapshot over the same segment bytes, replay the suffix."""
        image_before = self.machine.encode_image()
        if isinstance(self.store, FileSegmentStore):
            self.store.close()
            self.store = self._new_store()
        self.machine = self._new_machine()
        self.apply = Applier(self.machine)
        self.machine.restore(0, self.last_image)
        for cmd, result in self.since:
            replayed = self.apply(cmd)
            assert replayed == result, (cmd, replayed, result)
        assert self.machine.encode_image() == image_before

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def same_state(self) -> None:
        assert self.machine.queue_names() == sorted(self.model.queues)
        for name, q in self.model.queues.items():
            assert self.machine.attributes(name) == q.attributes
            stats = self.machine.stats(name, self.now)
            assert stats is not None
            basic = replace(stats, segments=SegmentCounts(), disk_bytes=0, oldest_unarchived_ms=0)
            assert basic == self.model.stats(name, self.now)
            live = sorted(q.msgs)
            stored = self.machine.read(name, live)
            assert [(m.seq, m.id, m.sent_at_ms) for m in stored] == [
                (s, q.msgs[s].id, q.msgs[s].sent_at) for s in live
            ]
            assert self.machine.pending_dead_letters(name) == sorted(
                s for s, m in q.msgs.items() if m.pending_dl
            )
            clock = max(self.now, q.clock)
            visible_now = any(not m.pending_dl and m.visible_at <= clock for m in q.msgs.values())
            assert self.machine.has_visible(name, self.now) == visible_now
            future = [
                m.visible_at for m in q.msgs.values() if not m.pending_dl and m.visible_at > q.clock
            ]
            nxt = self.machine.next_visible_at(name)
            assert nxt == (min(future) if future else None)
            retention = q.attributes.message_retention_seconds * 1000
            assert self.machine.expirable(name, self.now) == any(
                m.retention_start + retention <= clock for m in q.msgs.values()
            )


class FileQueueMachineTest(QueueMachineTest):
    store_kind = "file"


class RewindQueueMachineTest(QueueMachineTest):
    retain = 40


class FileRewindQueueMachineTest(QueueMachineTest):
    store_kind = "file"
    retain = 40


_settings = settings(
    max_examples=200,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestMemoryStore = QueueMachineTest.TestCase
TestMemoryStore.settings = _settings
TestFileStore = FileQueueMachineTest.TestCase
TestFileStore.settings = settings(_settings, max_examples=60)
TestRewind = RewindQueueMachineTest.TestCase
TestRewind.settings = settings(_settings, max_examples=60)
TestFileRewind = FileRewindQueueMachineTest.TestCase
TestFileRewind.settings = settings(_settings, max_examples=25)
