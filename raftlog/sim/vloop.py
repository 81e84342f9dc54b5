"""A deterministic asyncio event loop on virtual time, for simulating the asyncio runtime.

The loop never waits: when nothing is ready, its selector jumps the virtual clock straight to the
next timer. Callbacks run in asyncio's usual FIFO order and timers in deadline order, so a
program that takes its randomness from a seeded RNG and does no real I/O (no sockets, threads or
files) runs identically every time, and hours of simulated time pass in seconds.

A loop with nothing scheduled and nothing ready has deadlocked: `select` raises `SimDeadlock`
instead of blocking forever.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Mapping
from typing import Any


class SimDeadlock(RuntimeError):
    """The simulated program is waiting for something that can never happen."""


class _Clock:
    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no real file descriptors: `select` advances virtual time only."""

    def __init__(self, clock: _Clock) -> None:
        self._clock = clock
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise SimDeadlock("nothing is scheduled: the simulated program can never progress")
        if timeout > 0:
            self._clock.now += timeout
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time` is virtual and which never blocks (see module docstring)."""

    def __init__(self) -> None:
        self._vclock = _Clock()
        super().__init__(_VirtualSelector(self._vclock))

    def time(self) -> float:
        return self._vclock.now

    def advance(self, seconds: float) -> None:
        """Run every callback due within the next ``seconds`` of virtual time."""
        self.run_until_complete(asyncio.sleep(seconds))
