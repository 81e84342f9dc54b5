"""`DiskWatch`: the health of each data directory of a node, and what the node does about it.

A few times a second (`DiskPolicy.interval`) the watch reads each directory's WAL stats
(`raftlog.storage.walstats.WalStats`: a failure, the fsync in progress, the last fsync's
duration) and its free space (``os.statvfs``, on a worker thread; one probe per directory at a
time, so a hung file system never stalls the event loop or piles up threads), and judges it
(`assess`, pure). For each verdict:

* **failed** (the WAL stopped after an I/O error, `raftlog.errors.DiskFailed`: EIO from a write
  or an fsync, a real ENOSPC; or a group there stopped on an ``OSError`` of its own files: a
  snapshot's `raftlog.storage.files.atomic_write`, a segment file's write or
  `cmq.fsm.segments.FileSegmentStore.flush`, none of which is ever retried): every group bound
  to that directory is halted (it leads, votes
  and answers nothing: its peers elect another leader and the majority keeps committing), the
  node logs it at ERROR once, ``/v1/status`` shows it under ``disks`` (and each group's
  ``stopped``), ``cmq_disk_failed`` is 1 and ``/readyz`` answers 503. Other directories keep
  working. The way back is a restart of the process once the disk is fixed (the WAL's recovery
  trusts only what it reads back with valid checksums; what the failed directory lost is caught
  up from the peers).
* **full** (free space below `DiskPolicy.reserve_bytes`): sends to groups this node leads on
  that directory are refused with `cmq.errors.DiskFull` (nothing is proposed, so nothing
  changes); receives, acks and everything else go on, writing into the reserve. Sends are taken
  again as soon as space is back above the reserve. A follower whose disk fills is not stopped
  by the watch: once its WAL hits a real ENOSPC it fails (above) and the majority goes on.
* **slow** (the fsync in progress has run longer than `DiskPolicy.slow_fsync_seconds`, or the
  last one took longer: a disk is fast again once an fsync was): the leadership of every group
  led here on that directory is handed to its most caught-up recently active voter, at every
  check while the disk stays slow, so a leadership that comes back (an election, a peer's
  leader balancing) is handed away again. The proposals waiting on the old leader fail at once
  (outcome unknown: `raftlog.runtime.group.GroupDriver` notices the step-down even while its
  driver waits on the disk).
  Nothing is refused: the directory still works, only slowly. A hung fsync is a slow disk that
  never recovers: leadership moves away, and the groups' entries wait in that WAL's queue.

Transitions are logged (ERROR for a failure, WARNING for full or slow, INFO when back).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cmq.errors import DiskFull
from raftlog.errors import DiskFailed, RaftError
from raftlog.runtime import MultiRaft, Offload
from raftlog.storage import WalStats

log = logging.getLogger("cmq.disk")

DEFAULT_RESERVE_BYTES = 256 << 20
"""Free space kept for receives and acks: below it sends are refused (``--disk-reserve-bytes``)."""
DEFAULT_SLOW_FSYNC_SECONDS = 2.0
"""An fsync running (or the last one having run) longer than this makes the disk slow."""


@dataclass(frozen=True, slots=True)
class DiskPolicy:
    """What the watch judges against and how often it looks."""

    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    slow_fsync_seconds: float = DEFAULT_SLOW_FSYNC_SECONDS
    interval: float = 0.25


@dataclass(frozen=True, slots=True)
class DiskHealth:
    """One data directory's verdict (`assess`)."""

    directory: str
    failed: str
    """Why its WAL stopped (empty: it works)."""
    failed_errno: int
    free_bytes: int | None
    """Free space for this process (None: not known yet, or the probe is stuck)."""
    full: bool
    """Free space is below the reserve: sends are refused."""
    fsync_seconds: float
    """How long the fsync in progress has run or the last one took, whichever is longer."""
    slow: bool

    @property
    def state(self) -> str:
        """``failed``, ``full``, ``slow`` or ``ok`` (the first that holds)."""
        if self.failed:
            return "failed"
        if self.full:
            return "full"
        return "slow" if self.slow else "ok"

    def describe(self) -> dict[str, object]:
        """As ``/v1/status`` shows it under ``disks``."""
        return {
            "directory": self.directory,
            "state": self.state,
            "failed": self.failed or None,
            "errno": self.failed_errno or None,
            "free_bytes": self.free_bytes,
            "full": self.full,
            "slow": self.slow,
            "fsync_seconds": round(self.fsync_seconds, 3),
        }


def assess(
    directory: str,
    stats: WalStats,
    free: int | None,
    policy: DiskPolicy,
    now: float,
    *,
    file_error: OSError | None = None,
) -> DiskHealth:
    """The verdict on ``directory`` from its WAL ``stats``, its ``free`` bytes, the monotonic
    time ``now`` (the clock of ``WalStats.fsync_started``) and ``file_error``, an I/O error that
    stopped a group there (its snapshot or segment files). Pure."""
    running = now - stats.fsync_started if stats.fsync_started else 0.0
    # The longer of the two: a disk stays slow while its next (slow) fsync is young.
    fsync = max(running, stats.last_fsync_seconds)
    failed, code = stats.failed, stats.failed_errno
    if not failed and file_error is not None:
        code = file_error.errno or 0
        failed = f"{errno.errorcode.get(code, 'OSError')}: {file_error}"
    return DiskHealth(
        directory=directory,
        failed=failed,
        failed_errno=code,
        free_bytes=free,
        full=free is not None and free < policy.reserve_bytes,
        fsync_seconds=fsync,
        slow=not failed and fsync > policy.slow_fsync_seconds,
    )


class DiskWatch:
    """Judges every data directory and acts on the verdicts (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        raft: MultiRaft,
        data_dirs: Sequence[str],
        policy: DiskPolicy,
        *,
        offload: Offload,
        probe: Callable[[str], int | None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``probe`` answers a directory's free bytes, None when unknown (blocking: run through
        ``offload``; the node's `cmq.node.host.NodeFiles.free_bytes`);
        ``monotonic`` is the WAL's clock (``WalStats.fsync_started``)."""
        self._id = node_id
        self._raft = raft
        self._dirs = tuple(os.path.abspath(d) for d in data_dirs)
        self.policy = policy
        self._offload = offload
        self._probe = probe
        self._monotonic = monotonic
        self._free: dict[int, int | None] = {}
        self._probes: dict[int, asyncio.Future[int | None]] = {}
        self.health: tuple[DiskHealth, ...] = ()
        """The latest verdicts, in data-directory order (empty before the first check)."""
        self.handoffs = 0
        self.refused_sends = 0

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # never let the watch die: a bug here must not stop the node
                log.exception("disk check failed", extra={"event": "disk_check_failed"})
            await asyncio.sleep(self.policy.interval)

    async def check(self) -> tuple[DiskHealth, ...]:
        """Probe, judge and act once; returns the verdicts."""
        free = [await self._free_bytes(i, d) for i, d in enumerate(self._dirs)]
        if len(self._raft.wals) < len(self._dirs):
            return self.health  # not started, or closing
        now = self._monotonic()  # after the probes: no fsync can look as if it started later
        verdicts = []
        for i, d in enumerate(self._dirs):
            stats, error = self._raft.wals[i].stats(), self._file_error(i)
            verdicts.append(assess(d, stats, free[i], self.policy, now, file_error=error))
        before = self.health
        self.health = tuple(verdicts)
        for i, h in enumerate(self.health):
            self._log_change(before[i] if i < len(before) else None, h)
            if h.failed:
                self._halt_groups(i, h)
            elif h.slow:
                self._hand_off(i)
        return self.health

    async def _free_bytes(self, i: int, d: str) -> int | None:
        """The latest answer of directory ``i``'s probe; a new probe is started when none is
        running, and awaited briefly (a stuck one keeps its last answer)."""
        probe = self._probes.get(i)
        if probe is None or probe.done():
            if probe is not None:
                self._free[i] = None if probe.exception() is not None else probe.result()
            probe = self._probes[i] = asyncio.ensure_future(self._offload(self._probe, d))
        try:
            async with asyncio.timeout(0.5):
                self._free[i] = await asyncio.shield(probe)
        except TimeoutError:
            pass
        except OSError:
            self._free[i] = None
        return self._free.get(i)

    def _log_change(self, before: DiskHealth | None, now: DiskHealth) -> None:
        was = before.state if before is not None else "ok"
        if was == now.state:
            return
        if now.state == "failed":
            log.error(
                "node %d: data directory %s failed (%s): its groups stopped; restart the node "
                "once the disk is fixed",
                self._id,
                now.directory,
                now.failed,
                extra={"event": "disk_failed"},
            )
        elif now.state == "full":
            log.warning(
                "node %d: data directory %s has %s bytes free, below the reserve of %d: sends "
                "to the groups led here are refused (DiskFull)",
                self._id,
                now.directory,
                now.free_bytes,
                self.policy.reserve_bytes,
                extra={"event": "disk_full"},
            )
        elif now.state == "slow":
            log.warning(
                "node %d: data directory %s is slow (fsync %.1f s): handing off its groups' "
                "leadership",
                self._id,
                now.directory,
                now.fsync_seconds,
                extra={"event": "disk_slow"},
            )
        else:
            log.info("node %d: data directory %s is %s again", self._id, now.directory, now.state)

    def _file_error(self, i: int) -> OSError | None:
        """The I/O error a group on directory ``i`` stopped on, if one did (its own files)."""
        for g, exc in sorted(self._raft.halted().items()):  # the halted ones only: few
            if isinstance(exc, OSError) and self._raft.dir_for(g) == i:
                return exc
        return None

    def _groups_on(self, i: int) -> list[int]:
        return sorted(g for g in self._raft.groups if self._raft.dir_for(g) == i)

    def _halt_groups(self, i: int, h: DiskHealth) -> None:
        for g in self._groups_on(i):
            driver = self._raft.groups[g]
            if driver.stopped is None:
                driver.halt(DiskFailed(h.directory, h.failed_errno, h.failed))

    def _hand_off(self, i: int) -> None:
        """Ask each group led here on directory ``i`` to move to its best other voter."""
        for g in self._groups_on(i):
            try:
                if self._raft.groups[g].hand_over():
                    self.handoffs += 1
            except RaftError as e:
                log.info("group %d: slow-disk hand-off deferred: %s", g, e)

    # -- what the node asks ------------------------------------------------------------------
    def refuse_send(self, group: int) -> DiskFull | None:
        """`DiskFull` when ``group``'s directory here is below the reserve (checked on the
        leader, before a send is proposed), else None."""
        if group not in self._raft.groups:
            return None
        i = self._raft.dir_for(group)
        if i < len(self.health) and self.health[i].full:
            self.refused_sends += 1
            h = self.health[i]
            return DiskFull(
                f"the leader's data directory for this queue has {h.free_bytes} bytes free, "
                f"below its reserve of {self.policy.reserve_bytes}: sends are refused until "
                f"space is freed (receives and acks still work)"
            )
        return None

    def ok(self) -> bool:
        """No data directory failed (what ``/readyz`` requires of the disks)."""
        return not any(h.failed for h in self.health)

    def describe(self) -> list[dict[str, object]]:
        return [h.describe() for h in self.health]
