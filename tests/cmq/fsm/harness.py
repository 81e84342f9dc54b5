"""Helpers for the fsm tests: apply commands through the real byte encoding."""

from __future__ import annotations

from typing import cast

from cmq.fsm.commands import Command, Result, encode_command
from cmq.fsm.machine import QueueMachine


class Applier:
    """Feeds commands to a machine as committed entries (encoded bytes, increasing index)."""

    def __init__(self, machine: QueueMachine) -> None:
        self.machine = machine
        self.index = 0

    def __call__(self, cmd: Command) -> Result:
        self.index += 1
        return cast(Result, self.machine.apply(self.index, encode_command(cmd)))
