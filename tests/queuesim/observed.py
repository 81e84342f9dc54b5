"""`ObservingMachine`: a `QueueMachine` that shows every command it executes to an observer,
which checks an ordering rule from the commands and their results alone (the priority and
fairness simulations plug theirs in). `ReadyObserver` is the bookkeeping those observers share
(each message's readiness); `ObservedQueueSim` runs such a machine on every replica and counts
what its observers report as violations of the rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Generic, Protocol, TypeVar

from cmq.fsm.commands import (
    Ack,
    Command,
    CommandFailed,
    EntryOutcomes,
    Lease,
    Leased,
    NewMessage,
    Produce,
    Produced,
    Result,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import MemorySegmentStore
from raftlog.runtime.statemachine import StateMachine
from raftlog.sim.runtime_sim import RuntimeSimConfig
from tests.queuesim.sim import QueueSim

L = TypeVar("L")


class Observer(Protocol):
    """Sees a command before and after the machine executes it; reports what breaks its rule
    through the ``violation`` it was built with."""

    def before(self, m: QueueMachine, cmd: Command) -> dict[int, str]: ...

    def after(self, m: QueueMachine, cmd: Command, res: Result, ids: dict[int, str]) -> None: ...


class ReadyObserver(Generic[L]):
    """An `Observer` that follows one queue machine's queues from its commands and results: each
    queue's clock (every command with a time moves it) and, per message id, what the rule orders
    by (`label_of` its `NewMessage`: a tenant, a level) and when it is ready (sent, its delay
    over, not leased or its lease run out, not acked). Each lease is judged by `check_lease` as
    it applies, before its messages' leases count."""

    def __init__(self, violation: Callable[[str], None]) -> None:
        self.violation = violation
        self.clock: dict[str, int] = {}
        self.label: dict[str, dict[str, L]] = {}  # queue -> id -> label
        self.visible_at: dict[str, dict[str, int]] = {}  # queue -> id -> when it is ready

    def label_of(self, msg: NewMessage) -> L:
        """What the rule orders a sent message by."""
        raise NotImplementedError

    def check_lease(self, queue: str, clock: int, leased: list[str]) -> None:
        """Judge a lease of ``queue`` that applied at ``clock`` and took ``leased`` (ids, in the
        order leased); `label` and `visible_at` are as they stood before it."""
        raise NotImplementedError

    def before(self, m: QueueMachine, cmd: Command) -> dict[int, str]:
        """What must be known before ``cmd`` applies: the ids of an ack's seqs."""
        if isinstance(cmd, Ack):
            return {s.seq: s.id for s in m.read(cmd.queue, [seq for seq, _ in cmd.entries])}
        return {}

    def after(self, m: QueueMachine, cmd: Command, res: Result, ids: dict[int, str]) -> None:
        if isinstance(cmd, Produce) and isinstance(res, Produced):
            clock = self._advance(cmd.queue, cmd.now_ms)
            labels = self.label.setdefault(cmd.queue, {})
            visible = self.visible_at.setdefault(cmd.queue, {})
            for msg, (mid, _) in zip(cmd.messages, res.messages, strict=True):
                if mid == msg.id and mid not in labels:  # not a deduplicated repeat
                    labels[mid] = self.label_of(msg)
                    visible[mid] = clock + max(0, msg.delay_ms or 0)
        elif isinstance(cmd, Lease) and isinstance(res, Leased):
            self._lease(m, cmd, res)
        elif isinstance(cmd, Ack) and isinstance(res, EntryOutcomes):
            for (seq, _), code in zip(cmd.entries, res.outcomes, strict=True):
                mid = ids.get(seq)
                if code is None and mid is not None:
                    self.label.get(cmd.queue, {}).pop(mid, None)
                    self.visible_at.get(cmd.queue, {}).pop(mid, None)
        elif not isinstance(res, CommandFailed):
            queue, now_ms = getattr(cmd, "queue", None), getattr(cmd, "now_ms", None)
            if isinstance(queue, str) and isinstance(now_ms, int):
                self._advance(queue, now_ms)  # every command with a time moves the clock

    def _advance(self, queue: str, now_ms: int) -> int:
        clock = max(self.clock.get(queue, 0), now_ms)
        self.clock[queue] = clock
        return clock

    def _lease(self, m: QueueMachine, cmd: Lease, res: Leased) -> None:
        clock = self._advance(cmd.queue, cmd.now_ms)
        visible = self.visible_at.get(cmd.queue, {})
        leased = [s.id for s in m.read(cmd.queue, [lm.seq for lm in res.messages])]
        self.check_lease(cmd.queue, clock, leased)
        visibility = cmd.visibility_ms if cmd.visibility_ms is not None else 30_000
        for mid in leased:
            if mid in visible:
                visible[mid] = clock + max(0, visibility)


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


class ObservedQueueSim(QueueSim):
    """`QueueSim` whose replicas run `machine_class` (an `ObservingMachine`): what their
    observers report is a violation of `rule` (the first 20 only: every replica reports the
    same entry)."""

    machine_class: ClassVar[type[ObservingMachine]]
    rule: ClassVar[str]
    """Names the rule in the violations (``"{rule}: {what}"``)."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.rule_violations = 0

    def new_state_machine(self, nid: int, group: int) -> StateMachine:
        return self.machine_class(self.stores[(nid, group)], self.broken, segment_bytes=2048)

    def broken(self, what: str) -> None:
        self.rule_violations += 1
        if self.rule_violations <= 20:  # every replica reports the same entry
            self.violation(f"{self.rule}: {what}")
