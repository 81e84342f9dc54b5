"""The futures of durable writes, shared by the WAL (`raftlog.storage.wal`, `GroupLog`) and its
in-memory twin (`raftlog.storage.memory`): `accepted_future` (a write taken, not yet durable),
`done_future` (nothing to write) and `complete` (a write durable: what it makes visible, then
its future)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future


def accepted_future() -> Future[None]:
    """The future of a write just taken. It is running, so it cannot be cancelled: once accepted,
    a record is written regardless, and pretending a cancel took effect would lie about
    durability."""
    fut: Future[None] = Future()
    fut.set_running_or_notify_cancel()
    return fut


def done_future() -> Future[None]:
    """The future of a submission with nothing to write: already complete."""
    fut = accepted_future()
    fut.set_result(None)
    return fut


def complete(future: Future[None], on_durable: Callable[[], None] | None) -> None:
    """A write became durable: run ``on_durable`` (what the write makes visible, such as the
    read side's update), then complete ``future``; whatever ``on_durable`` raises fails the
    future instead."""
    if on_durable is not None:
        try:
            on_durable()
        except Exception as exc:
            future.set_exception(exc)
            return
    future.set_result(None)
