"""Helpers for the fsm tests: apply commands through the real byte encoding."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cmq.fsm.commands import (
    Ack,
    Command,
    CommandFailed,
    CommandType,
    CreateQueue,
    Lease,
    Leased,
    NewMessage,
    Produce,
    Result,
    encode_command,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.memory import MemorySegmentStore
from cmq.fsm.store import SegmentStore
from cmq.fsm.wire import Writer
from cmq.model import QueueAttributes

T0 = 1_700_000_000_000

Run = Callable[[Command], Result]
"""What executes a command: a machine's `execute`, or an `Applier`."""


class Applier:
    """Feeds commands to a machine as committed entries (encoded bytes, increasing index)."""

    def __init__(self, machine: QueueMachine) -> None:
        self.machine = machine
        self.index = 0

    def __call__(self, cmd: Command) -> Result:
        self.index += 1
        return self.machine.apply(self.index, encode_command(cmd))


def legacy_produce(cmd: Produce) -> bytes:
    """``cmd`` as a `PRODUCE` (type 5) of logs written before `PRODUCE_RECORDS`."""
    w = Writer()
    w.u8(CommandType.PRODUCE)
    w.text(cmd.queue)
    w.i64(cmd.now_ms)
    w.u32(len(cmd.messages))
    for m in cmd.messages:
        w.text(m.id)
        w.blob(m.body)
        w.u8(1 if m.binary else 0)
        w.u32(len(m.attributes))
        for k, v in m.attributes:
            w.text(k)
            w.text(v)
        w.opt_i64(m.delay_ms)
        w.opt_text(m.dedup_id)
    if any(m.group_id is not None for m in cmd.messages):
        w.u32(len(cmd.messages))
        for m in cmd.messages:
            w.opt_text(m.group_id)
    return w.getvalue()


def sent(run: Run, queue: str, now: int, msgs: Iterable[NewMessage]) -> list[int]:
    """The seqs of ``msgs``, produced to ``queue`` at ``now`` by ``run`` (a machine's `execute`
    or an `Applier`); the send must not fail."""
    out = run(Produce(queue, now, tuple(msgs)))
    assert not isinstance(out, CommandFailed), out
    return [seq for _, seq in out.messages]  # type: ignore[union-attr]


def leased(
    run: Run, queue: str, now: int, n: int, vis: int | None, *, attempt: str | None = None
) -> Leased:
    """A lease of up to ``n`` messages of ``queue`` at ``now`` by ``run``; it must succeed."""
    got = run(Lease(queue, now, n, vis, attempt))
    assert isinstance(got, Leased), got
    return got


def leased_ids(machine: QueueMachine, queue: str, res: object) -> list[str]:
    """The ids of the messages a `Leased` result names, read from ``machine`` as the service
    renders them (a lease's result carries seqs and leases, not ids)."""
    assert isinstance(res, Leased), res
    return [m.id for m in machine.read(queue, [lm.seq for lm in res.messages])]


def one_queue(messages: int) -> Applier:
    """A machine (in memory) with queue "q" of default attributes, made at `T0`, and one send
    of ``messages`` one-byte messages ``m0``, ``m1``, ... at `T0`, applied through `Applier`."""
    run = Applier(QueueMachine(MemorySegmentStore()))
    run(CreateQueue("q", QueueAttributes(), T0))
    run(
        Produce(
            "q",
            T0,
            tuple(NewMessage(f"m{i}", b"x", False, (), None, None) for i in range(messages)),
        )
    )
    return run


def two_queues(
    store: SegmentStore, *, segment_bytes: int, messages: int, padding: int
) -> QueueMachine:
    """A machine on ``store`` (its segments of ``segment_bytes``) with queues "a" and "b",
    applied through the byte encoding from `T0` on: ``messages`` sends of one message each
    (``a0``, ``a1``, ...; the bodies padded with ``padding`` bytes), then five of "a"'s leased
    and acknowledged."""
    m = QueueMachine(store, segment_bytes=segment_bytes)
    apply = Applier(m)
    for q in ("a", "b"):
        apply(CreateQueue(q, QueueAttributes(), T0))
        for k in range(messages):
            body = b"%s-%d-" % (q.encode(), k) + b"x" * padding
            apply(Produce(q, T0 + k, (NewMessage(f"{q}{k}", body, False, (), None, None),)))
    leased = apply(Lease("a", T0 + 100, 5, 30_000))
    assert isinstance(leased, Leased)
    apply(Ack("a", T0 + 101, tuple((m.seq, m.lease_id) for m in leased.messages)))
    return m
