"""The scrubber: re-read what this node stores at a bounded rate, and hand damage to repair.

A sealed segment or a snapshot is written once and then read rarely (a receive of an old
message, a restart, the archive), so a bit that rots in it would be found only when a read
needs it. The scrubber reads every sealed segment of every data-group replica on this node
(`SegmentStore.verify`: every record's frame, checksum and seq) and every open group's latest
snapshot file (`MultiRaft.verify_snapshot`), one after the other, at most ``rate`` bytes per
second (``cmq serve --scrub-rate``, MB/s; 0 turns it off), then starts over after a pause.

What it finds goes to the repair path (`MultiRaft.repair_group`, `raftlog.runtime.repair`):
this node's replica of that group is reset and caught up from the others, before a read hits
the damage. With repairs disabled (the ``self_repair`` flag not yet enabled) a finding is
logged loudly and counted, and the node keeps serving what it can (a read of the damaged
range fails, never returns bad bytes). Progress and findings are metrics (`ScrubStats`).

Reads run on worker threads (the node's offload), one chunk at a time; the event loop only
sleeps between chunks, so the rate bound is also the scrubber's whole cost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from cmq.fsm.machine import QueueMachine
from raftlog.errors import is_storage_damage
from raftlog.runtime import MultiRaft, Offload

log = logging.getLogger("cmq.scrub")

CHUNK = 256 << 10
"""Bytes read per step (a segment is verified in steps of this size)."""
PASS_PAUSE = 30.0
"""Seconds between the end of one pass and the start of the next."""


@dataclass(frozen=True, slots=True)
class ScrubStats:
    """Bytes, sealed segments and snapshots checked since start; passes completed; findings
    (damage found, each handed to repair)."""

    bytes: int
    segments: int
    snapshots: int
    passes: int
    findings: int


class Scrubber:
    """Scrubs the replicas of this node (see the module docstring). ``machines`` is the
    node's data-group state machines by group (read afresh at each step: groups come and go)."""

    def __init__(
        self,
        raft: MultiRaft,
        machines: Mapping[int, QueueMachine],
        *,
        rate: float,
        offload: Offload,
        pause: float = PASS_PAUSE,
    ) -> None:
        self._raft = raft
        self._machines = machines
        self.rate = rate
        """Bytes per second at most (0: off)."""
        self._offload = offload
        self._pause = pause
        self._bytes = self._segments = self._snapshots = self._passes = self._findings = 0

    def describe(self) -> dict[str, float | int]:
        """The rate and `stats` as ``/v1/status`` shows them (``scrub``)."""
        st = self.stats()
        return {
            "rate": self.rate,
            "bytes": st.bytes,
            "segments": st.segments,
            "snapshots": st.snapshots,
            "passes": st.passes,
            "findings": st.findings,
        }

    def stats(self) -> ScrubStats:
        return ScrubStats(
            self._bytes, self._segments, self._snapshots, self._passes, self._findings
        )

    async def run(self) -> None:
        """Scrub forever (returns at once when the rate is 0)."""
        if self.rate <= 0:
            return
        while True:
            await self.scrub_pass()
            await asyncio.sleep(self._pause)

    async def scrub_pass(self) -> None:
        """One pass over every sealed segment and snapshot this node holds now."""
        for group in sorted(self._raft.groups):
            if self._raft.repairs.under_way(group):
                continue  # its files are being replaced: nothing to judge
            await self._scrub_snapshot(group)
            machine = self._machines.get(group)
            driver = self._raft.groups.get(group)
            if machine is None or driver is None:
                continue
            for queue_key, first, size in self._sealed(machine):
                if self._raft.groups.get(group) is not driver:
                    break  # reset by a repair (or dropped) meanwhile: the listing is stale
                if await self._scrub_segment(group, machine, queue_key, first, size):
                    break  # the group is being repaired: its files are going
        self._passes += 1

    @staticmethod
    def _sealed(machine: QueueMachine) -> list[tuple[str, int, int]]:
        """(queue store key, first seq, size) of every sealed segment, taken at once."""
        return [seg for name in machine.queue_names() for seg in machine.sealed_segments(name)]

    async def _scrub_snapshot(self, group: int) -> None:
        started = time.monotonic()
        try:
            size = await self._raft.verify_snapshot(group)
        except Exception as exc:
            if not is_storage_damage(exc):
                raise
            self._found(group, str(exc))
            return
        if size:
            self._snapshots += 1
            self._bytes += size
            await self._pace(size, started)

    async def _scrub_segment(
        self, group: int, machine: QueueMachine, queue_key: str, first: int, size: int
    ) -> bool:
        """Verify one segment; True when damage was found."""
        steps: Iterator[int] = machine.store.verify(queue_key, first, size, CHUNK)
        driver = self._raft.groups.get(group)
        done = 0
        while True:
            if self._raft.groups.get(group) is not driver or self._raft.repairs.under_way(group):
                return False  # the group left this node or is being repaired meanwhile
            started = time.monotonic()
            try:
                checked: int | None = await self._offload(next, steps, None)
            except Exception as exc:
                if not is_storage_damage(exc):
                    raise
                if self._raft.groups.get(group) is not driver:
                    return False  # its files were replaced while they were read
                if (queue_key, first, size) not in self._sealed(machine):
                    # Released or archived since the pass listed it: its file is removed once
                    # a snapshot no longer lists it, so a short or missing file is not damage.
                    return False
                self._found(group, str(exc))
                return True
            if checked is None:
                self._segments += 1
                return False
            self._bytes += checked - done
            await self._pace(checked - done, started)
            done = checked

    async def _pace(self, nbytes: int, started: float) -> None:
        """Sleep so that ``nbytes`` read since ``started`` stay within the rate (none when the
        rate is 0: a pass asked for directly runs unthrottled)."""
        if self.rate <= 0:
            return
        wait = nbytes / self.rate - (time.monotonic() - started)
        if wait > 0:
            await asyncio.sleep(wait)

    def _found(self, group: int, what: str) -> None:
        self._findings += 1
        repairing = self._raft.repair_group(group, what)
        log.error(
            "scrub: group %d: %s%s",
            group,
            what,
            " (repairing from the other replicas)"
            if repairing
            else " (self_repair is not enabled: this replica stays damaged; enable the flag "
            "or restore the node with --rejoin)",
            extra={"event": "replica_damaged", "group": group},
        )
