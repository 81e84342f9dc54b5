"""What the whole-node simulator wraps around the twins and patches around the node.

- `SlowDisks`: the memory disks (`raftlog.storage.memory.MemoryDisks`) with the
  ``disk.slow_fsync`` fault point: a write's completion reaches the node up to 0.2 s late,
  completions still in submission order (as a WAL's).
- `seeded_ids`: the random prefix of message ids (`cmq.routing.produce.ProduceBuilder`,
  ``secrets.token_hex``) is drawn from the run's generator, so a seed replays to the same ids.
  Every clock reading of a node comes from its `cmq.node.host.NodeHost` clock.
- `virtual_scrub_pace` (``--failover`` runs): the scrubber's pacing reads the loop's time, not
  the host's monotonic clock (which made a seed's run depend on the host's speed).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any
from unittest import mock

from cmq.node import scrubber
from cmq.routing import produce
from raftlog.buggify import buggify, uniform
from raftlog.core import ConfState, Entry, HardState, Snapshot
from raftlog.core.storage import ReadThrough
from raftlog.runtime.group_options import DurableLog
from raftlog.runtime.host import LogDisk
from raftlog.storage.completion import accepted_future
from raftlog.storage.memory import MemoryDisks
from tests.nodesim.process import NeutralLoop


class _Ordered:
    """Completions of one log, in submission order, some held back (``disk.slow_fsync``)."""

    def __init__(self, loop: NeutralLoop) -> None:
        self._loop = loop
        self._tail: Future[None] | None = None

    def __call__(self, fut: Future[None]) -> Future[None]:
        prev = self._tail
        extra = uniform(0.0, 0.2) if buggify("disk.slow_fsync") else 0.0
        if extra == 0.0 and (prev is None or prev.done()):
            self._tail = fut
            return fut
        out = accepted_future()
        self._tail = out

        def finish() -> None:
            if out.done():
                return
            exc = fut.exception()
            if exc is not None:
                out.set_exception(exc)
            else:
                out.set_result(None)

        def ready(_: object = None) -> None:
            if not fut.done() or (prev is not None and not prev.done()):
                return
            if extra:
                self._loop.call_later(extra, finish)
            else:
                finish()

        fut.add_done_callback(lambda _: self._loop.call_soon(ready))
        if prev is not None:
            prev.add_done_callback(lambda _: self._loop.call_soon(ready))
        return out


class _SlowLog(ReadThrough):
    """A `DurableLog` whose completions go through `_Ordered` (its reads pass through)."""

    def __init__(self, inner: DurableLog, loop: NeutralLoop) -> None:
        self._base: DurableLog = inner
        self._order = _Ordered(loop)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def submit_ready(
        self,
        *,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        hard_state: HardState | None = None,
        sync: bool = True,
    ) -> Future[None]:
        fut = self._base.submit_ready(
            snapshot=snapshot, entries=entries, hard_state=hard_state, sync=sync
        )
        return self._order(fut)

    def submit_create_snapshot(
        self, index: int, conf: ConfState, data: bytes
    ) -> tuple[Snapshot, Future[None]]:
        snap, fut = self._base.submit_create_snapshot(index, conf, data)
        return snap, self._order(fut)

    def compact(self, index: int) -> None:
        self._base.compact(index)


class _SlowDisk:
    """A `LogDisk` whose groups' logs are `_SlowLog`s."""

    def __init__(self, inner: LogDisk, loop: NeutralLoop) -> None:
        self._inner = inner
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def directory(self) -> str:
        return self._inner.directory

    def open_group(self, group: int, initial_conf: ConfState | None) -> DurableLog:
        return _SlowLog(self._inner.open_group(group, initial_conf), self._loop)


class SlowDisks:
    """`MemoryDisks` with the ``disk.slow_fsync`` fault point (a `LogDisks`)."""

    def __init__(self, disks: MemoryDisks, loop: NeutralLoop) -> None:
        self.disks = disks
        self._loop = loop

    def __call__(self, directory: str) -> LogDisk:
        return _SlowDisk(self.disks(directory), self._loop)  # type: ignore[return-value]


class _Secrets:
    """``secrets`` for `cmq.routing.produce`, from a seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def token_hex(self, nbytes: int) -> str:
        return self._rng.randbytes(nbytes).hex()


@contextmanager
def seeded_ids(rng: random.Random) -> Iterator[None]:
    """Draw `cmq.routing.produce`'s message-id randomness from ``rng`` for one run."""
    with mock.patch.object(produce, "secrets", _Secrets(rng)):
        yield


class _LoopTime:
    """``time`` for `cmq.node.scrubber`: ``monotonic`` reads the simulator's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def monotonic(self) -> float:
        return self._loop.time()


@contextmanager
def virtual_scrub_pace(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """The scrubber paces its reads by ``time.monotonic()`` (`cmq.node.scrubber`): under the
    simulator its sleeps then depend on how fast the host ran, and so does the rest of the run
    (a seed did not replay). Read the loop's time instead (used by ``--failover`` runs)."""
    with mock.patch.object(scrubber, "time", _LoopTime(loop)):
        yield
