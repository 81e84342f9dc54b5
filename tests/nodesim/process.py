"""Simulated processes on one virtual-time event loop: a node can be paused (SIGSTOP) and
killed (SIGKILL) although every node shares the loop.

Every callback a node's code schedules carries the node's `Process` in its context (the
`PROCESS` context variable): its tasks are started in that context (`Process.spawn`), a task's
steps run in it, futures it awaits call back into it, timers it sets inherit it, and frames its
transport delivers are handled in it (`ProcessTransport`). `ProcessLoop` looks at each callback
as it becomes ready:

- a *paused* process's callbacks are held, in order, and released when it resumes (late: a
  stopped process's timers fire when it runs again, as after SIGCONT);
- a *killed* process's callbacks never run (its tasks stay pending forever and are dropped with
  it, as a killed process runs no ``finally``);
- everything else (the harness, the network, the disks) runs as usual.

The twins of the network and the disks are given a `NeutralLoop`: their own timers belong to no
process, so a frame in flight or an fsync under way is not held or dropped with the process that
started it (the twins decide, by their own rules, what a crash does to it).

Nothing here reads a clock or draws a random number: a run stays a function of its seed.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from raftlog.buggify import buggify
from raftlog.sim.vloop import VirtualTimeLoop
from raftlog.transport.codec import FrameKind
from raftlog.transport.memory import MemoryNetwork, MemoryTransport
from raftlog.transport.protocol import ProtocolRange

T = TypeVar("T")

PROCESS: contextvars.ContextVar[Process | None] = contextvars.ContextVar(
    "nodesim_process", default=None
)
"""The simulated process whose code is running (None: the harness, a twin)."""


class Process:
    """One incarnation of a simulated node's process."""

    def __init__(self, name: str, clock: Any) -> None:
        self.name = name
        self.clock = clock
        """The node's `raftlog.runtime.host.Clock` (the harness's clock patches read it)."""
        self.paused = False
        self.dead = False
        self.held: list[asyncio.Handle] = []
        self.disturbed = 0
        """Pauses and kills so far: a call that saw one may take longer than its deadline."""
        self.tasks: set[asyncio.Task[Any]] = set()
        """Its tasks not finished: a killed process's stay referenced (never collected during
        the run, whose ``finally`` blocks would then run at a moment the seed does not fix)."""

    def context(self) -> contextvars.Context:
        """A fresh context in which code runs as this process."""
        ctx = contextvars.Context()
        ctx.run(PROCESS.set, self)
        return ctx

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` as this process (a task whose every step belongs to it)."""
        loop = asyncio.get_running_loop()
        return loop.create_task(coro, name=name, context=self.context())

    def __repr__(self) -> str:
        state = "dead" if self.dead else "paused" if self.paused else "running"
        return f"<Process {self.name} {state}>"


def _owner(handle: asyncio.Handle) -> Process | None:
    ctx: contextvars.Context | None = getattr(handle, "_context", None)
    return None if ctx is None else ctx.get(PROCESS)


class _Ready(deque[asyncio.Handle]):
    """The loop's ready queue, holding back paused processes' callbacks and dropping dead
    ones' (every path that makes a callback ready appends it here)."""

    def append(self, handle: asyncio.Handle) -> None:
        proc = _owner(handle)
        if proc is not None:
            if proc.dead:
                return
            if proc.paused:
                proc.held.append(handle)
                return
        super().append(handle)


TURN = 1e-9
"""Virtual seconds each turn of the loop with work ready takes."""


class ProcessLoop(VirtualTimeLoop):
    """A `VirtualTimeLoop` that can pause and kill `Process`es (see the module docstring).

    Each turn of the loop with work ready takes `TURN` of virtual time, as any turn takes some
    real time: otherwise a timer due within the loop's clock resolution fires at once, time
    stands still while callbacks are ready, and a coroutine that waits for the few remaining
    femtoseconds of a deadline in a loop (``remaining = deadline - loop.time()``) never reaches
    it."""

    def __init__(self) -> None:
        super().__init__()
        self._ready: _Ready = _Ready()
        selector = self._selector
        select = selector.select
        clock = self._vclock

        def turn(timeout: float | None = None) -> list[Any]:
            if timeout == 0:
                clock.now += TURN
            return select(timeout)

        selector.select = turn  # type: ignore[method-assign]

    def create_task(  # type: ignore[override]
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        task = super().create_task(coro, name=name, context=context)
        proc = PROCESS.get() if context is None else context.get(PROCESS)
        if proc is not None:
            proc.tasks.add(task)
            task.add_done_callback(proc.tasks.discard)
        return task

    def _take_ready(self, proc: Process) -> list[asyncio.Handle]:
        """Cancel ``proc``'s callbacks already queued in this iteration; copies of them."""
        taken: list[asyncio.Handle] = []
        for h in list(self._ready):
            if not h.cancelled() and _owner(h) is proc:
                h.cancel()
                taken.append(_copy(h, self))
        return taken

    def pause(self, proc: Process) -> None:
        if proc.paused or proc.dead:
            return
        proc.paused = True
        proc.disturbed += 1
        proc.held.extend(self._take_ready(proc))

    def resume(self, proc: Process) -> None:
        if not proc.paused:
            return
        proc.paused = False
        held, proc.held = proc.held, []
        for h in held:
            if not h.cancelled():
                self._ready.append(h)

    def kill(self, proc: Process) -> None:
        """``proc`` never runs again."""
        if proc.dead:
            return
        proc.dead = True
        proc.disturbed += 1
        self._take_ready(proc)
        for h in proc.held:
            h.cancel()
        proc.held = []


def _copy(h: asyncio.Handle, loop: asyncio.AbstractEventLoop) -> asyncio.Handle:
    callback: Callable[..., object] = h._callback  # type: ignore[attr-defined]
    args: tuple[object, ...] = h._args  # type: ignore[attr-defined]
    return asyncio.Handle(callback, args, loop, context=h._context)  # type: ignore[attr-defined]


class NeutralLoop:
    """What the network and disk twins are given for a loop: the real loop's time and timers,
    each callback in a fresh context that belongs to no process."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def time(self) -> float:
        return self._loop.time()

    def call_soon(self, callback: Callable[..., object], *args: object) -> asyncio.Handle:
        return self._loop.call_soon(callback, *args, context=contextvars.Context())

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: object
    ) -> asyncio.TimerHandle:
        return self._loop.call_later(delay, callback, *args, context=contextvars.Context())

    def call_at(
        self, when: float, callback: Callable[..., object], *args: object
    ) -> asyncio.TimerHandle:
        return self._loop.call_at(when, callback, *args, context=contextvars.Context())


class ProcessTransport(MemoryTransport):
    """A node's `MemoryTransport` whose frames and lost connections are handled as the node's
    process; a frame sent may be lost on the way (the ``net.drop_frame`` fault point)."""

    __slots__ = ("process",)

    def __init__(
        self,
        network: MemoryNetwork,
        node_id: int,
        peers: tuple[int, ...],
        *,
        protocols: ProtocolRange,
        process: Process,
    ) -> None:
        super().__init__(network, node_id, peers, protocols=protocols)
        self.process = process

    def send(self, peer: int, kind: FrameKind, body: bytes) -> bool:
        if buggify("net.drop_frame") and super().is_connected(peer):
            return True  # lost on its way, unnoticed
        return super().send(peer, kind, body)

    def deliver(self, peer: int, kind: FrameKind, body: bytes) -> None:
        token = PROCESS.set(self.process)
        try:
            super().deliver(peer, kind, body)
        finally:
            PROCESS.reset(token)

    def peer_down(self, peer: int) -> None:
        token = PROCESS.set(self.process)
        try:
            super().peer_down(peer)
        finally:
            PROCESS.reset(token)
