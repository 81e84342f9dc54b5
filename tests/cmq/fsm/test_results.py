"""Each queue command declares the result a successful apply answers it with (its
``result_type``), and the machine keeps to it: every command, applied, returns its declared
result or a `CommandFailed`."""

from __future__ import annotations

from typing import get_args

from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    ClaimSegments,
    Command,
    CommandFailed,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Expire,
    Lease,
    Leased,
    MarkArchived,
    Nack,
    NewMessage,
    Produce,
    Purge,
    Result,
    Retime,
    Rewind,
    SetAttributes,
    Tidy,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.memory import MemorySegmentStore
from cmq.model import QueueAttributes

from .harness import Applier

T0 = 1_700_000_000_000


def test_every_command_declares_one_of_the_results() -> None:
    results = set(get_args(Result))
    for command in get_args(Command):
        assert command.result_type in results, command
        assert command.result_type is not CommandFailed, command


def test_the_machine_answers_each_command_with_its_declared_result() -> None:
    run = Applier(QueueMachine(MemorySegmentStore(), segment_bytes=200))
    archived = QueueAttributes(archive=True, dead_letter_queue="dlq", max_receive_count=1)
    messages = tuple(NewMessage(f"m{i}", b"x" * 50, False, (), None, None) for i in range(6))
    seen: set[type] = set()

    def check(cmd: Command) -> Result:
        res = run(cmd)
        assert isinstance(res, type(cmd).result_type), (cmd, res)
        seen.add(type(cmd))
        return res

    check(CreateQueue("q", archived, T0))
    check(Produce("q", T0, messages))
    leased = check(Lease("q", T0, 3, 30_000))
    assert isinstance(leased, Leased) and len(leased.messages) == 3
    first, second, third = ((m.seq, m.lease_id) for m in leased.messages)
    check(Ack("q", T0, (first,)))
    check(ChangeVisibility("q", T0, ((*second, 1_000),)))
    check(Nack("q", T0, (third,), 0))
    dead = check(Lease("q", T0 + 60_000, 10, 0))  # each at its receive limit now
    assert isinstance(dead, Leased)
    check(DeadLetter("q", dead.dead_letter))
    check(Expire("q", T0 + 60_000))
    check(Tidy("q", T0 + 60_000))
    check(ClaimSegments("q", T0 + 60_000, "batch-1", (1,), 1_000))
    check(MarkArchived("q", T0 + 60_000, "batch-1", (1,)))
    check(Retime("q", T0))
    check(Rewind("q", T0 + 60_000, T0))
    check(SetAttributes("q", QueueAttributes()))
    check(Purge("q", T0 + 60_000))
    check(DeleteQueue("q"))
    assert seen == set(get_args(Command))
    assert isinstance(run(Purge("q", T0)), CommandFailed)  # gone: failed, not another result
