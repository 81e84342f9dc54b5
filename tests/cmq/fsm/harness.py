"""Helpers for the fsm tests: apply commands through the real byte encoding."""

from __future__ import annotations

from cmq.fsm.commands import Command, CommandType, Leased, Produce, Result, encode_command
from cmq.fsm.machine import QueueMachine
from cmq.fsm.wire import Writer


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


def leased_ids(machine: QueueMachine, queue: str, res: object) -> list[str]:
    """The ids of the messages a `Leased` result names, read from ``machine`` as the service
    renders them (a lease's result carries seqs and leases, not ids)."""
    assert isinstance(res, Leased), res
    return [m.id for m in machine.read(queue, [lm.seq for lm in res.messages])]
