"""One group's log on a `raftlog.storage.memory.MemoryDisk`: `MemoryLog`, the in-memory twin of
`raftlog.storage.logstore.GroupLog` (a `raftlog.runtime.group_options.DurableLog`).

Its read side is the core's `Storage`, holding only what completed writes made durable; its
write side turns a Ready's snapshot, entries and hard state (or a snapshot taken here) into the
disk's records (`raftlog.storage.memory_records`) and submits them to the disk it belongs to.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from raftlog.core.storage import MemoryStorage, ReadThrough
from raftlog.core.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from raftlog.errors import InvariantViolation
from raftlog.storage.completion import done_future
from raftlog.storage.memory_records import MemEntries, MemHardState, MemRecord, MemSnapshot

if TYPE_CHECKING:
    from raftlog.storage.memory import MemoryDisk


class MemoryLog(ReadThrough):
    """One group's log on a `MemoryDisk` (a `raftlog.runtime.group_options.DurableLog`).

    Read side: the core's `Storage`, served from a `MemoryStorage` that holds what completed
    writes made durable (never a write still in flight). Write side: like `GroupLog`, writes are
    validated against the *staged* log (including writes in flight), so a caller may pipeline
    submissions; they complete in order.
    """

    __slots__ = ("_base", "_disk", "_epoch", "_floor", "_group", "_last", "_snap")

    def __init__(self, disk: MemoryDisk, group: int, view: MemoryStorage, epoch: int) -> None:
        """Private: `MemoryDisk.open_group` makes them."""
        self._disk = disk
        self._group = group
        self._base: MemoryStorage = view
        self._epoch = epoch
        self._floor = view.first_index() - 1
        self._last = view.last_index()
        self._snap = view.snapshot().meta.index

    def staged(self, floor: int, last: int, snap: int) -> None:
        """Private: the staged log after the disk wrote something for this group itself."""
        self._floor, self._last, self._snap = floor, last, snap

    @property
    def group(self) -> int:
        return self._group

    # -- read side (Storage: `ReadThrough` to the view) ------------------------------------------
    def verify_snapshot(self) -> int:
        """`DurableLog.verify_snapshot`: memory does not rot, so there is nothing to read."""
        return 0

    # -- write side (DurableLog) -----------------------------------------------------------------
    def submit_ready(
        self,
        *,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        hard_state: HardState | None = None,
        sync: bool = True,
    ) -> Future[None]:
        """Persist a Ready's snapshot, entries and hard state as one submission (the semantics
        of `GroupLog.submit_ready`: an older snapshot is ignored, entries at or below the
        compaction point are skipped, a gap raises `InvariantViolation` and writes nothing)."""
        records: list[MemRecord] = []
        floor, last, snap_index = self._floor, self._last, self._snap
        if snapshot is not None and snapshot.meta.index > snap_index:
            records.append(MemSnapshot(self._group, snapshot, install=True))
            floor = last = snap_index = snapshot.meta.index
        else:
            snapshot = None
        ents = tuple(e for e in entries if e.index > floor)
        if ents:
            if ents[0].index > last + 1:
                raise InvariantViolation(f"gap: appending {ents[0].index} after last {last}")
            records.append(MemEntries(self._group, ents))
            last = ents[-1].index
        if hard_state is not None:
            records.append(MemHardState(self._group, hard_state))
        if not records:
            return done_future()
        view = self._base

        def durable() -> None:
            if snapshot is not None:
                view.apply_snapshot(snapshot)
            if ents:
                view.append(ents)
            if hard_state is not None:
                view.set_hard_state(hard_state)

        fut = self._disk.submit(records, sync=sync, on_durable=durable, epoch=self._epoch)
        self._floor, self._last, self._snap = floor, last, snap_index
        return fut

    def submit_create_snapshot(
        self, index: int, conf: ConfState, data: bytes
    ) -> tuple[Snapshot, Future[None]]:
        """Record a snapshot of the state machine at ``index`` (a durable entry); one not newer
        than the staged snapshot is not written: the current one is returned, already done."""
        if index <= self._snap:
            return self._base.snapshot(), done_future()
        snap = Snapshot(SnapshotMeta(index, self._base.term(index), conf), data)
        view = self._base

        def durable() -> None:
            view.create_snapshot(index, conf, data)

        fut = self._disk.submit(
            (MemSnapshot(self._group, snap, install=False),),
            sync=True,
            on_durable=durable,
            epoch=self._epoch,
        )
        self._snap = index
        return snap, fut

    def compact(self, index: int) -> None:
        """Drop entries up to ``index`` (at most the durable snapshot's) from the read side."""
        self._base.compact(index)
        self._floor = max(self._floor, index)
