"""Long-poll wake-ups: `Wakeups` (one event per queue a receive waits on) and `WakingMachine`, a
data group's `QueueMachine` as the raftlog runtime drives it, which hands the machine's apply
effects (the queues that changed) to the wake-ups after each batch of applies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from cmq.fsm.commands import Result
from cmq.fsm.machine import QueueMachine

__all__ = ["Wakeups", "WakingMachine"]


class Wakeups:
    """Long-poll wake-ups: one event per queue someone waits on, set when the queue changed;
    and how many receives wait on each queue now (`waiting`, for the metrics)."""

    __slots__ = ("_events", "_waiting")

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}

    def waiting(self) -> dict[str, int]:
        """Queue -> receives waiting on it now (only queues with at least one; a copy)."""
        return dict(self._waiting)

    def notify(self, queues: Iterable[str]) -> None:
        """Wake the receives waiting on any of ``queues``."""
        events = self._events
        for name in queues:
            event = events.get(name)
            if event is not None:
                event.set()

    async def wait(self, name: str, limit: float) -> None:
        """Sleep until ``name`` changes, or ``limit`` seconds."""
        event = self._events.setdefault(name, asyncio.Event())
        event.clear()
        waiting = self._waiting
        waiting[name] = waiting.get(name, 0) + 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await event.wait()
        finally:
            left = waiting[name] - 1
            if left:
                waiting[name] = left
            else:
                del waiting[name]


class WakingMachine:
    """A data group's `QueueMachine` as the raftlog runtime drives it (a
    `raftlog.runtime.statemachine.StateMachine` of `Result` results): after each batch of
    applies (or a restore) the runtime calls `after_apply`, which ends the batch
    (`QueueMachine.end_batch`: the segment appends are written out) and hands the machine's
    effects (the queues that changed, `QueueMachine.take_changed`) to the long-poll wake-ups.
    The machine itself never calls out of `apply`."""

    __slots__ = ("machine", "wakeups")

    def __init__(self, machine: QueueMachine, wakeups: Wakeups) -> None:
        self.machine = machine
        self.wakeups = wakeups

    def apply(self, index: int, command: bytes) -> Result:
        return self.machine.apply(index, command)

    def snapshot(self) -> bytes:
        return self.machine.snapshot()

    def export_snapshot(self, data: bytes) -> bytes:
        return self.machine.export_snapshot(data)

    def restore(self, index: int, data: bytes) -> None:
        self.machine.restore(index, data)

    def after_apply(self) -> None:
        self.machine.end_batch()
        changed = self.machine.take_changed()
        if changed:
            self.wakeups.notify(changed)
