"""The rollback fault: a crashed node comes back on an older copy of its disk.

A *backup* of a node's durable state (every group's `SimDisk.image`) is taken when the node
crashes, with probability one half; at a later crash of the same node, with probability one
half, its disks are restored to that backup instead of recovering normally -- everything it made
durable since, acknowledged entries and votes included, is gone.

Raft's safety rests on disks that never forget; the core's recovery rule
(`raftlog.core.recovery`) must make up for one that does. It can only if some copy of each
acknowledged entry survives, so at most one node is *rolled back* at a time: the next rollback
waits until that node's disks hold again every index they lost. Backups are taken only of disks
that have been in a term (a node rolled back to before it ever voted is a new node, whose data
loss the operator declares with rejoin mode), and a group's disk is rolled back only while the
group's configuration is the one of the backup: a node restored across a membership change asks
the voters of a stale configuration, which the recovery rule does not cover.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from raftlog.core.types import ConfState
from raftlog.sim.disk import DiskImage, SimDisk


class Rollbacks:
    """Backups and rollbacks of the simulated nodes' disks. Mutable; owned by the simulation."""

    __slots__ = ("_backups", "_owed")

    def __init__(self) -> None:
        self._backups: dict[int, dict[int, tuple[DiskImage, ConfState]]] = {}
        # Rolled-back nodes: per group, the highest index the rollback took away.
        self._owed: dict[int, dict[int, int]] = {}

    def on_crash(
        self,
        rng: random.Random,
        node: int,
        disks: Mapping[tuple[int, int], SimDisk],
        groups: Sequence[int],
        conf: Callable[[int], ConfState],
    ) -> str | None:
        """Called after ``node``'s disks crashed: maybe roll them back, else maybe back them
        up (``conf``: a group's current configuration). Returns a trace note when a rollback
        happened."""
        self._settle(disks)
        backup = self._backups.get(node)
        if backup is not None and not self._owed and rng.random() < 0.5:
            owed = {
                g: disks[(node, g)].rollback(image)
                for g, (image, at) in backup.items()
                if conf(g) == at
            }
            del self._backups[node]
            owed = {g: top for g, top in owed.items() if top}
            if owed:
                self._owed[node] = owed
            lost = " ".join(f"g{g}:to{top}" for g, top in sorted(owed.items()))
            return f"ROLLBACK n{node} to its backup ({lost or 'nothing lost'})"
        if rng.random() < 0.5:
            images = {g: (disks[(node, g)].image(), conf(g)) for g in groups}
            if all(im.hard_state.term > 0 for im, _ in images.values()):
                self._backups[node] = images
        return None

    def _settle(self, disks: Mapping[tuple[int, int], SimDisk]) -> None:
        for node, owed in list(self._owed.items()):
            if all(disks[(node, g)].last_index() >= top for g, top in owed.items()):
                del self._owed[node]
