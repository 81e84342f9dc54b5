"""The in-memory twin of a data directory's WAL: `MemoryDisk` and `MemoryDisks`.

A `MemoryDisk` is what a `raftlog.runtime.host.LogDisk` promises, kept in memory and timed by a
scheduler it is given (an event loop, usually a virtual-time one, and a seeded
``random.Random``), so a simulated node runs the real host over it deterministically: no
thread, no file, every completion a callback on the loop.

The disk is one ordered sequence of records shared by every group bound to it (a snapshot
installed or taken, a batch of entries, a hard state, a group's drop), as in the WAL:

- **Writing.** A submission's records are written at once (in order, after everything written
  before) but not durable. Group commit: the submissions queued while a batch is in flight form
  the next batch; a batch completes after a seeded delay, with one "fsync" covering every
  record written before the batch started when any of its submissions asked to sync (a batch
  of ``sync=False`` submissions only writes, as the WAL does). Completions run in submission
  order; each updates its group's read side (what `Storage` reports: durable state only), then
  completes its future.
- **Power loss** (`MemoryDisk.power_loss`): the durable records stay; of the records written
  but not synced, a seeded random prefix survives and the next one may be torn (recovery stops
  there and drops it); nothing in flight completes any more, and every log handed out before
  is dead (its writes go nowhere, its futures never complete: the process is gone). The disk
  itself survives, as an object the simulation keeps (`MemoryDisks` holds every directory's),
  and the next `MemoryDisks` call for its directory reopens it with what survived, exactly as
  `raftlog.sim.disk.SimDisk` does for the core simulator.
- **Close** drains: everything written becomes durable and every submission completes, as
  `Wal.close` does.
- **Snapshots** live in memory, in their records; a group's log reads them back whole.

What the disk holds are the records of `raftlog.storage.memory_records`; a group's view of it
(the twin of `GroupLog`) is `raftlog.storage.memory_log.MemoryLog`, re-exported here.

`MemoryDiskOptions` holds the delays and the test-only planted bug of the runtime simulator
(``unsafe_early_ack``: completions before the sync, which a power loss of every node must
expose).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from raftlog.core.storage import MemoryStorage, bootstrap_snapshot
from raftlog.core.types import ConfState
from raftlog.errors import InvariantViolation, Overloaded, RaftError, WalClosed
from raftlog.storage.completion import accepted_future, complete
from raftlog.storage.memory_log import MemoryLog
from raftlog.storage.memory_records import (
    MemDrop,
    MemEntries,
    MemHardState,
    MemRecord,
    MemSnapshot,
    record_size,
)
from raftlog.storage.repairs import RepairMarks
from raftlog.storage.walstats import WalCounters, WalStats

__all__ = ["MemoryDisk", "MemoryDiskOptions", "MemoryDisks", "MemoryLog", "PowerLoss"]


@dataclass(frozen=True, slots=True)
class MemoryDiskOptions:
    """Timings (seconds of the scheduler's loop) and faults of a `MemoryDisk`."""

    fsync_delay: tuple[float, float] = (0.0002, 0.004)
    """A batch that syncs completes after a delay drawn uniformly from this range..."""
    write_delay: tuple[float, float] = (0.00005, 0.0005)
    """...and one that only writes, after one from this range."""
    torn_probability: float = 0.3
    """At a power loss, the chance that the first record lost is left torn."""
    unsafe_early_ack: bool = False
    """Test-only planted bug: a submission completes (reports durable) as soon as it is
    written, and the disk syncs only later, after `late_sync` (a log that fsyncs on a timer).
    A power loss of one node then loses entries it acknowledged, which the core's recovery rule
    makes up for from its peers; a power loss of every node at once loses committed entries."""
    late_sync: tuple[float, float] = (0.2, 1.0)
    """With ``unsafe_early_ack``: how long after a write its sync comes."""
    max_pending_submissions: int = 8192
    """Submissions waiting for the batch in flight, at most (more: `Overloaded`, as the WAL)."""


@dataclass(frozen=True, slots=True)
class PowerLoss:
    """What a power loss did to the records written but not synced: how many survived whole,
    how many were lost, and whether the first one lost was left torn."""

    kept: int
    lost: int
    torn: bool


@dataclass(slots=True)
class _Submission:
    records: tuple[MemRecord, ...]
    sync: bool
    on_durable: Callable[[], None]
    future: Future[None]


def _copy(image: MemoryStorage) -> MemoryStorage:
    """A fresh `MemoryStorage` holding what ``image`` holds (a restart's read side)."""
    ms = MemoryStorage()
    snap = image.snapshot()
    if snap.meta.index > 0:
        ms.apply_snapshot(snap)
    first, last = image.first_index(), image.last_index()
    if last >= first:
        ms.append(image.entries(first, last + 1, 1 << 62))
    ms.set_hard_state(image.initial_state()[0])
    return ms


class MemoryDisk:
    """One data directory's log in memory (a `LogDisk`; see the module docstring).

    Invariants: the durable images are exactly the replay, in order, of every record synced
    (or kept by a power loss); a completion runs only in the incarnation that submitted it.
    """

    __slots__ = (
        "_counters",
        "_directory",
        "_epoch",
        "_failed",
        "_images",
        "_inflight",
        "_logs",
        "_loop",
        "_open",
        "_options",
        "_queue",
        "_repairs",
        "_rng",
        "_synced",
        "_unpowered",
        "_written",
        "power_losses",
    )

    def __init__(
        self,
        directory: str,
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        options: MemoryDiskOptions | None = None,
    ) -> None:
        """A new, empty disk (closed: `MemoryDisks` opens it)."""
        self._directory = directory
        self._loop = loop
        self._rng = rng
        self._options = options or MemoryDiskOptions()
        self._images: dict[int, MemoryStorage] = {}
        """Per group, the durable state: the replay of every synced record."""
        self._written: list[MemRecord] = []
        """Records written and not yet synced, oldest first."""
        self._synced = 0
        """How many records were ever synced: ``_written[0]`` is record number ``_synced``."""
        self._logs: dict[int, MemoryLog] = {}
        self._queue: list[_Submission] = []
        """Submissions waiting for the batch in flight to finish."""
        self._inflight: list[_Submission] = []
        """The batch in flight (empty: none)."""
        self._epoch = 0
        self._unpowered: set[int] = set()
        """The incarnations that ended in a power loss."""
        self._open = False
        self._failed: BaseException | None = None
        self._counters = WalCounters()
        self._repairs = RepairMarks(None)
        self.power_losses: list[PowerLoss] = []
        """What each power loss did, oldest first."""

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Start an incarnation (a process opening the directory); the previous one must have
        closed the disk or lost power."""
        if self._open:
            raise InvariantViolation(f"{self._directory} is already open")
        self._open = True
        self._failed = None

    def close(self) -> None:
        """Drain: make everything written durable and complete every submission, then close.
        A no-op on a disk that is not open (closed, or its power was lost)."""
        if not self._open:
            return
        self._sync_all()
        waiting, self._inflight, self._queue = self._inflight + self._queue, [], []
        self._complete(waiting)
        self._end_incarnation()

    def power_loss(self) -> PowerLoss:
        """Lose power now (see the module docstring); returns what became of the unsynced
        records. The disk is closed afterwards; submissions in flight never complete."""
        n = len(self._written)
        kept = self._rng.randint(0, n)
        torn = kept < n and self._rng.random() < self._options.torn_probability
        # A torn record fails its checksum: recovery stops there, so it is lost with the rest.
        self._sync(kept)
        self._written = []
        self._inflight = []
        self._queue = []
        self._unpowered.add(self._epoch)
        self._end_incarnation()
        outcome = PowerLoss(kept, n - kept, torn)
        self.power_losses.append(outcome)
        return outcome

    def _end_incarnation(self) -> None:
        self._epoch += 1
        self._open = False
        self._logs.clear()

    # -- LogDisk ---------------------------------------------------------------------------------
    @property
    def directory(self) -> str:
        return self._directory

    def groups(self) -> tuple[int, ...]:
        """Groups with state here (durable, or opened in this incarnation), sorted."""
        return tuple(sorted(set(self._images) | set(self._logs)))

    def open_group(self, group: int, initial_conf: ConfState | None) -> MemoryLog:
        """``group``'s log (one owner per incarnation). A group new to this disk is empty, or,
        for a founding member (``initial_conf`` with voters), holds the bootstrap snapshot,
        durable before this returns. A group with durable state ignores ``initial_conf``."""
        self._check_open()
        if group in self._logs:
            raise InvariantViolation(f"group {group} is already open on {self._directory}")
        image = self._images.get(group)
        view = _copy(image) if image is not None else MemoryStorage()
        log = MemoryLog(self, group, view, self._epoch)
        self._logs[group] = log
        if image is None and initial_conf is not None and initial_conf.voters:
            snap = bootstrap_snapshot(initial_conf)
            self._write((MemSnapshot(group, snap, install=True),))
            self._sync(len(self._written))  # like GroupLog: waits for its fsync
            view.apply_snapshot(snap)
            log.staged(snap.meta.index, snap.meta.index, snap.meta.index)
        return log

    def drop_group(self, group: int) -> Future[None]:
        """Durably forget ``group``: a drop record voids its history once synced."""
        self._check_open()

        def dropped() -> None:
            self._logs.pop(group, None)

        return self.submit((MemDrop(group),), sync=True, on_durable=dropped)

    @property
    def repairs(self) -> RepairMarks:
        """The repair record (in memory, durable at once: it outlives power losses)."""
        return self._repairs

    def segments(self) -> tuple[int, ...]:
        """One segment: memory needs no rotation, so no group ever pins an old one."""
        return (1,)

    def pinning_groups(self) -> tuple[int, ...]:
        return ()

    def stats(self) -> WalStats:
        return self._counters.stats(segments=1)

    # -- inspection (tests and simulators) -------------------------------------------------------
    def durable(self, group: int) -> MemoryStorage | None:
        """``group``'s durable state (what a power loss now would keep at least), if any."""
        return self._images.get(group)

    def unsynced(self) -> int:
        """How many records are written and not yet durable."""
        return len(self._written)

    # -- writing ---------------------------------------------------------------------------------
    def submit(
        self,
        records: Sequence[MemRecord],
        *,
        sync: bool,
        on_durable: Callable[[], None],
        epoch: int | None = None,
    ) -> Future[None]:
        """Write ``records`` and complete (after ``on_durable``) once the batch they join is
        done. From a log of an incarnation that lost power (``epoch``), nothing happens and
        the future never completes (that process is gone); from one that closed the disk,
        `WalClosed`."""
        if epoch is not None and epoch != self._epoch:
            if epoch in self._unpowered:
                return accepted_future()
            raise WalClosed(f"{self._directory} was closed")
        self._check_open()
        if self._failed is not None:
            raise WalClosed("the disk stopped after an error") from self._failed
        if len(self._queue) >= self._options.max_pending_submissions:
            raise Overloaded(f"{self._directory}: {len(self._queue)} submissions queued")
        recs = tuple(records)
        sub = _Submission(recs, sync, on_durable, accepted_future())
        self._write(recs)
        if self._options.unsafe_early_ack:
            self._complete([sub])
            lo, hi = self._options.late_sync
            mark = self._synced + len(self._written)
            self._loop.call_later(self._rng.uniform(lo, hi), self._late_sync, self._epoch, mark)
            return sub.future
        self._queue.append(sub)
        if not self._inflight:
            self._start_batch()
        return sub.future

    def _check_open(self) -> None:
        if not self._open:
            raise WalClosed(f"{self._directory} is not open")

    def _write(self, records: Sequence[MemRecord]) -> None:
        self._written.extend(records)

    def _start_batch(self) -> None:
        batch, self._queue = self._queue, []
        self._inflight = batch
        sync = any(s.sync for s in batch)
        lo, hi = self._options.fsync_delay if sync else self._options.write_delay
        delay = self._rng.uniform(lo, hi)
        # The fsync covers what was written before it started, not what comes in meanwhile.
        mark = self._synced + len(self._written)
        self._loop.call_later(delay, self._finish_batch, self._epoch, batch, sync, mark, delay)

    def _finish_batch(
        self, epoch: int, batch: list[_Submission], sync: bool, mark: int, delay: float
    ) -> None:
        if epoch != self._epoch:
            return  # lost power (or closed) first: the batch's fate was decided then
        records = sum(len(sub.records) for sub in batch)
        nbytes = sum(record_size(r) for sub in batch for r in sub.records)
        self._counters.wrote(len(batch), records, nbytes, delay if sync else None)
        if sync:
            self._sync(mark - self._synced)
        self._inflight = []
        self._complete(batch)
        if self._queue and self._epoch == epoch:
            self._start_batch()

    def _late_sync(self, epoch: int, mark: int) -> None:
        if epoch == self._epoch and mark > self._synced:
            self._sync(mark - self._synced)

    def _sync_all(self) -> None:
        self._sync(len(self._written))

    def _complete(self, batch: list[_Submission]) -> None:
        for sub in batch:
            if self._failed is not None:
                err = WalClosed("the disk stopped after an error")
                err.__cause__ = self._failed
                sub.future.set_exception(err)
                continue
            complete(sub.future, sub.on_durable)

    def _sync(self, count: int) -> None:
        """Make the oldest ``count`` written records durable (replay them onto the images). A
        record that cannot be replayed stops the disk for good, like an I/O error stops a WAL."""
        count = max(0, min(count, len(self._written)))
        done, self._written = self._written[:count], self._written[count:]
        self._synced += count
        for rec in done:
            try:
                self._replay(rec)
            except RaftError as exc:
                self._failed = exc
                return

    def _replay(self, rec: MemRecord) -> None:
        if isinstance(rec, MemDrop):
            self._images.pop(rec.group, None)
            return
        image = self._images.get(rec.group)
        if image is None:
            image = self._images[rec.group] = MemoryStorage()
        if isinstance(rec, MemHardState):
            image.set_hard_state(rec.hard_state)
        elif isinstance(rec, MemEntries):
            image.append(rec.entries)
        elif rec.install:
            image.apply_snapshot(rec.snapshot)
        else:
            meta = rec.snapshot.meta
            if meta.index <= image.snapshot().meta.index:
                return
            if image.term(meta.index) != meta.term:
                raise InvariantViolation(
                    f"group {rec.group}: snapshot at {meta.index}/{meta.term} does not match "
                    "the durable log"
                )
            image.create_snapshot(meta.index, meta.conf, rec.snapshot.data)
            image.compact(meta.index)


class MemoryDisks:
    """Every simulated data directory's `MemoryDisk`, by directory (a `LogDisks`).

    Calling it opens a directory's disk, creating it empty the first time; a disk outlives the
    hosts that open it (a restarted node finds what its power losses left)."""

    __slots__ = ("_disks", "_loop", "_options", "_rng")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        options: MemoryDiskOptions | None = None,
    ) -> None:
        self._loop = loop
        self._rng = rng
        self._options = options or MemoryDiskOptions()
        self._disks: dict[str, MemoryDisk] = {}

    def __call__(self, directory: str) -> MemoryDisk:
        disk = self._disks.get(directory)
        if disk is None:
            disk = self._disks[directory] = MemoryDisk(
                directory, self._loop, self._rng, self._options
            )
        disk.open()
        return disk

    def __getitem__(self, directory: str) -> MemoryDisk:
        return self._disks[directory]

    def __contains__(self, directory: object) -> bool:
        return directory in self._disks

    def directories(self) -> tuple[str, ...]:
        return tuple(sorted(self._disks))
