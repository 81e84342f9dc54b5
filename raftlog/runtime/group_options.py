"""What a `raftlog.runtime.group.GroupDriver` is given and keeps: the storage it needs
(`DurableLog`), its limits (`GroupOptions`), its counters, and the host's callbacks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future as ThreadFuture
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from raftlog.core import ConfState, Entry, HardState, Message, Snapshot, Storage

_P = ParamSpec("_P")
_T = TypeVar("_T")


class DurableLog(Storage, Protocol):
    """The storage a driver needs: the core's read side plus asynchronous durable writes."""

    def submit_ready(
        self,
        *,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        hard_state: HardState | None = None,
        sync: bool = True,
    ) -> ThreadFuture[None]: ...

    def submit_create_snapshot(
        self, index: int, conf: ConfState, data: bytes
    ) -> tuple[Snapshot, ThreadFuture[None]]: ...

    def compact(self, index: int) -> None: ...

    def verify_snapshot(self) -> int:
        """Re-read the latest snapshot's stored copy and check it (blocks: a worker thread);
        damage raises `raftlog.errors.CorruptRecord`. Returns the bytes read (0: nothing
        stored apart from memory)."""
        ...


@dataclass(frozen=True, slots=True)
class GroupOptions:
    """Per-group runtime limits."""

    max_pending_proposals: int = 4096
    max_pending_bytes: int = 32 << 20
    max_batch_bytes: int = 4 << 20
    snapshot_entries: int = 20000
    """Take a snapshot once this many entries were applied since the last one..."""
    snapshot_bytes: int = 64 << 20
    """...or once this many bytes were (entries carry whole batches, so both bounds matter)."""
    keep_entries: int = 5000
    """Entries kept in memory behind a snapshot so slightly lagging followers avoid one..."""
    keep_bytes: int = 16 << 20
    """...but never more than this many bytes of them."""
    max_snapshot_transfer: int = (1 << 30) - (1 << 20)
    """Largest snapshot shipped to a follower (the transport sends it in checksummed chunks
    and a peer accepts chunked frames up to 1 GiB); a larger one is refused loudly."""


@dataclass(slots=True)
class GroupCounters:
    proposals: int = 0
    batches: int = 0
    readies: int = 0
    persisted_entries: int = 0
    applied_entries: int = 0
    snapshots: int = 0
    forced_snapshots: int = 0


Sender = Callable[[int, Sequence[Message]], None]
"""Host callback: (group id, messages) → queue them for their peers."""


class Offload(Protocol):
    """Runs a blocking call (file writes, fsyncs, recovery) off the event loop and awaits its
    result: ``asyncio.to_thread`` in production; the simulators pass one that calls it inline
    (their storage is in memory and never blocks), so runs stay deterministic."""

    def __call__(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> Awaitable[_T]: ...
