"""`ObservingMachine`: a `QueueMachine` that shows every command it executes to an observer,
which checks an ordering rule from the commands and their results alone (the priority and
fairness simulations plug theirs in)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol

from cmq.fsm.commands import Command, Result
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import MemorySegmentStore


class Observer(Protocol):
    """Sees a command before and after the machine executes it; reports what breaks its rule
    through the ``violation`` it was built with."""

    def before(self, m: QueueMachine, cmd: Command) -> dict[int, str]: ...

    def after(self, m: QueueMachine, cmd: Command, res: Result, ids: dict[int, str]) -> None: ...


class ObservingMachine(QueueMachine):
    """A `QueueMachine` with an `observer_class` observer on every command it executes, until
    it is restored from a snapshot (the observer has not seen the commands the image folds
    in)."""

    observer_class: ClassVar[Callable[[Callable[[str], None]], Observer]]

    def __init__(
        self, store: MemorySegmentStore, violation: Callable[[str], None], **kw: int
    ) -> None:
        super().__init__(store, **kw)  # type: ignore[arg-type]
        self.observer: Observer | None = self.observer_class(violation)

    def restore(self, index: int, data: bytes) -> None:
        if data:
            self.observer = None
        super().restore(index, data)

    def execute(self, cmd: Command) -> Result:
        observer = self.observer
        if observer is None:
            return super().execute(cmd)
        ids = observer.before(self, cmd)
        res = super().execute(cmd)
        observer.after(self, cmd, res, ids)
        return res
