"""Repairing a group's replica whose stored state is damaged, from the group's other replicas.

Damage is what `raftlog.errors.is_storage_damage` says it is: a WAL record that fails its
checksum before the tail (recovery cut it, ``WalOptions.salvage``), a snapshot file that is
missing or fails its checksum, or the state machine's own files (its errors carry the same
mark). It is found when a group opens, when its driver halts on it while running, or when the
application reports it (a read, a scrubber: `ReplicaRepair.repair`).

The repair of one group's replica here, in order:

1. **mark** it in its directory's repair record (`raftlog.storage.repairs`), durably, first;
2. **leadership**: a leader hands the group to its most caught-up voter and waits briefly;
3. **reset**: stop the driver, void the group's history on its disk (a DROP record, its
   snapshot files go) — what was damaged is never read again;
4. **rejoin**: open the group again, empty, in the core's rejoin mode: it neither votes nor
   campaigns, and its acknowledgements count only for entries it holds, until it has caught
   up to a commit index learned from a leader; the leader re-probes it (`LOG_LOST`) and ships
   it a snapshot (checksummed end to end, with the state machine's files) and entries;
5. **clear** the mark once the core has caught up (checked every `SETTLE_INTERVAL`).

A restart in the middle opens every marked group in rejoin mode again (step 4 on), so no
restart loop and no operator action. Repairs are disabled (``enabled`` False: damage is raised
as before, and the node refuses to start naming the file) until the application enables them,
e.g. behind a feature flag: a release that predates the repair record must not open a
directory where a repair is under way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftlog.core import Role
from raftlog.errors import RaftError
from raftlog.runtime.group_options import Offload

if TYPE_CHECKING:
    from raftlog.runtime.group import GroupDriver
    from raftlog.runtime.host import Clock, LogDisk

log = logging.getLogger("raftlog.repair")

SETTLE_INTERVAL = 0.2
"""Seconds between checks of whether a group under repair has caught up."""
HANDOVER_WAIT = 1.0
"""Longest wait for a leader's transfer before it resets anyway (its peers then elect)."""


@dataclass(frozen=True, slots=True)
class RepairStats:
    """This node's repairs: under way (group -> reason), started and completed since start."""

    under_repair: tuple[tuple[int, str], ...]
    started: int
    completed: int


class ReplicaRepair:
    """The repairs of one host's groups (see the module docstring).

    ``groups`` and ``disks`` are the host's registry of open drivers and its disk per data
    directory; ``dir_of`` says which disk a group is bound to; ``reopen`` opens a group again
    empty in rejoin mode (the host's `open_group` for the group's state machine); ``clock`` is
    the host's (virtual under a simulator)."""

    def __init__(  # noqa: PLR0917 - the host's parts, each named in the docstring
        self,
        groups: dict[int, GroupDriver],
        disks: list[LogDisk],
        dir_of: Callable[[int], int],
        reopen: Callable[[int, int], Awaitable[None]],
        offload: Offload,
        clock: Clock,
    ) -> None:
        self.enabled = False
        """Repair damage (else it is raised as before: see the module docstring)."""
        self._groups = groups
        self._disks = disks
        self._dir_of = dir_of
        self._reopen = reopen
        self._offload = offload
        self._clock = clock
        self._running: dict[int, asyncio.Task[None]] = {}
        self.voters: dict[int, tuple[int, ...]] = {}
        """The voters each open group last knew (the host records them): a reset replica,
        which knows none until caught up, nudges these (`GroupDriver.nudge`)."""
        self._started_at: dict[int, float] = {}
        self.started = 0
        self.completed = 0

    def marked(self, group: int, index: int) -> bool:
        """Whether ``group`` is marked for repair on disk ``index`` (it then opens rejoining)."""
        return group in self._disks[index].repairs.marked()

    def under_way(self, group: int) -> bool:
        """Whether ``group``'s replica here is being repaired (marked, or its reset running)."""
        return group in self._running or any(group in d.repairs.marked() for d in self._disks)

    def stats(self) -> RepairStats:
        marks: dict[int, str] = {}
        for d in self._disks:
            marks.update({g: m.reason for g, m in d.repairs.marked().items()})
        return RepairStats(tuple(sorted(marks.items())), self.started, self.completed)

    async def reset(self, group: int, index: int, reason: str) -> None:
        """Steps 1 and 3 for a group that is not running (its opening found the damage): mark
        it, then void its history on disk ``index``."""
        disk = self._disks[index]
        log.error(
            "group %d: stored state damaged (%s): repairing from its replicas",
            group,
            reason,
            extra={"event": "repair_started", "group": group},
        )
        await self._offload(disk.repairs.mark, group, reason, self._clock.wall_ms())
        self.started += 1
        self._started_at[group] = self._clock.monotonic()
        await asyncio.wrap_future(await self._offload(disk.drop_group, group))

    def repair(self, group: int, reason: str) -> bool:
        """Repair the running ``group`` (all five steps) in the background; False when repairs
        are disabled or the group is not open here. A repair under way is not started again."""
        if not self.enabled or group not in self._groups:
            return False
        if group not in self._running:
            task = asyncio.get_running_loop().create_task(
                self._repair(group, reason), name=f"repair-group-{group}"
            )
            self._running[group] = task
            task.add_done_callback(self._forget_task)
        return True

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        for g, t in list(self._running.items()):
            if t is task:
                del self._running[g]

    async def _repair(self, group: int, reason: str) -> None:
        try:
            driver = self._groups.get(group)
            if driver is None:
                return
            if driver.raw.raft.conf.voters:
                self.voters[group] = driver.raw.raft.conf.voters
            await self._hand_over(driver)
            index = self._dir_of(group)
            if self._groups.get(group) is driver:
                del self._groups[group]
            await driver.stop(f"group {group}: this replica is damaged and being repaired")
            await self.reset(group, index, reason)
            await self._reopen(group, index)
        except Exception:
            log.exception(
                "group %d: repair failed; it stays marked (a restart resumes it)",
                group,
                extra={"event": "repair_failed", "group": group},
            )

    async def _hand_over(self, driver: GroupDriver) -> None:
        """A leader transfers the group to its most caught-up voter, then waits up to
        `HANDOVER_WAIT` for the transfer (a follower has nothing to hand over)."""
        raft = driver.raw.raft
        try:
            if not driver.hand_over():
                return
        except RaftError as e:
            log.info("group %d: hand-over before the repair refused: %s", driver.group, e)
            return
        deadline = self._clock.monotonic() + HANDOVER_WAIT
        while raft.role is Role.LEADER and self._clock.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def run(self) -> None:
        """Step 5, forever: clear the mark of every group that has caught up."""
        while True:
            await asyncio.sleep(SETTLE_INTERVAL)
            await self.settle()

    async def settle(self) -> None:
        """Clear the mark of each marked group that is open and no longer rejoining."""
        for index, disk in enumerate(self._disks):
            for group in disk.repairs.marked():
                driver = self._groups.get(group)
                if driver is None or driver.stopped is not None or group in self._running:
                    continue
                if self._dir_of(group) != index:
                    continue
                raft = driver.raw.raft
                if raft.rejoining:
                    if not raft.lead:
                        driver.nudge(self.voters.get(group, ()))
                    continue
                await self._offload(disk.repairs.clear, group)
                self.completed += 1
                began = self._started_at.pop(group, None)
                took = "" if began is None else f" in {self._clock.monotonic() - began:.2f} s"
                log.warning(
                    "group %d: repaired from its replicas%s",
                    group,
                    took,
                    extra={"event": "repair_completed", "group": group},
                )

    async def close(self) -> None:
        """Cancel the repairs under way (their marks stay: a restart resumes them)."""
        tasks = list(self._running.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
