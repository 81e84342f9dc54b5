"""The one-queue machine the segment lifecycle tests drive (`cmq.fsm.lifecycle`): `Env`, a
queue ``q`` whose segments hold 10 messages each, fed through the byte encoding (`Applier`)
from `T0` on, with `ARCHIVE` attributes by default and messages from `msg`; `record_size`, one
stored record's bytes; `pinned`, a history that keeps one message leased; and `machine_run`,
a machine on a given store after a run of copies forward (`Tidy`)."""

from __future__ import annotations

from cmq.fsm import (
    Ack,
    CreateQueue,
    EntryOutcomes,
    Leased,
    MemorySegmentStore,
    NewMessage,
    Produce,
    Produced,
    QueueMachine,
)
from cmq.fsm.commands import Tidy
from cmq.fsm.store import SegmentStore
from cmq.model import QueueAttributes
from cmq.segment_values import SegmentRecord

from .harness import T0, Applier, leased

ARCHIVE = QueueAttributes(
    archive=True,
    visibility_timeout=10,
    dead_letter_queue="dlq",
    max_receive_count=2,
    message_retention_seconds=60,
)


def msg(i: int) -> NewMessage:
    return NewMessage(f"id{i}", f"body{i}".encode(), False, (("k", str(i)),), None, None)


class Env:
    """One queue ``q`` whose segments hold 10 messages each (by size)."""

    def __init__(
        self,
        attrs: QueueAttributes = ARCHIVE,
        store: SegmentStore | None = None,
        seg_bytes: int | None = None,
    ) -> None:
        self.store = store if store is not None else MemorySegmentStore()
        self.m = QueueMachine(self.store)
        self.run = Applier(self.m)
        size = seg_bytes if seg_bytes is not None else 10 * record_size()
        self.run(CreateQueue("q", attrs, T0, size, 3_600_000))
        self.next = 0

    def produce(self, n: int, now: int = T0) -> list[int]:
        res = self.run(Produce("q", now, tuple(msg(self.next + i) for i in range(n))))
        self.next += n
        assert isinstance(res, Produced)
        return [seq for _, seq in res.messages]

    def lease(self, n: int, now: int = T0, vis: int | None = None) -> Leased:
        return leased(self.run, "q", now, n, vis)

    def ack(self, leased: Leased, now: int = T0) -> tuple[str | None, ...]:
        entries = tuple((m.seq, m.lease_id) for m in leased.messages)
        res = self.run(Ack("q", now, entries))
        assert isinstance(res, EntryOutcomes)
        return res.outcomes

    def states(self) -> list[tuple[int, str]]:
        return [(s.first_seq, s.state) for s in self.m.segments("q") or []]

    def records(self, first: int) -> list[SegmentRecord]:
        _, batches = self.m.records("q", first, chunk=100)
        return [r for batch in batches for r in batch]


def record_size() -> int:
    from cmq.fsm.store import StoredMessage, encode_record

    return len(encode_record(StoredMessage("id0", 1, b"body0", False, (("k", "0"),), T0), T0))


def pinned(e: Env, now: int) -> Leased:
    """Produce 1..30, lease 1 and keep it, ack 2..30 but leave 29 live... see the caller."""
    e.produce(30, now)
    e.produce(1, now)  # 31: seals 21..30
    held = e.lease(1, now, vis=60_000)
    rest = e.lease(28, now)  # 2..29
    e.ack(rest, now)
    return held


def machine_run(store: SegmentStore) -> tuple[QueueMachine, Applier, Leased]:
    m = QueueMachine(store)
    run = Applier(m)
    e = Env.__new__(Env)
    e.store, e.m, e.run, e.next = store, m, run, 0
    run(CreateQueue("q", ARCHIVE, T0, 10 * record_size(), 3_600_000))
    held = pinned(e, T0)
    run(Tidy("q", T0 + 1))
    e.produce(25, T0 + 2)
    e.ack(e.lease(10, T0 + 3), T0 + 3)
    run(Tidy("q", T0 + 4))
    return m, run, held
