"""A damaged replica is repaired from the group's other replicas (`raftlog.runtime.repair`).

Three MultiRaft hosts on loopback with real WALs. One node's stored state is damaged while it is
down (a snapshot file, a WAL record before the tail) or while it runs (its state machine reports
damage): with repairs enabled it marks the group, resets it, rejoins and is caught up, then
clears the mark; every replica ends with the same commands. With repairs disabled, the damage
stops the node as before, naming the file.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from raftlog.errors import CorruptRecord
from raftlog.runtime import MultiRaft
from raftlog.runtime.applog import AppendLog
from raftlog.storage.repairs import REPAIR_FILE
from tests.raftlog.runtime.nodes import (
    closing,
    make_nodes,
    open_all,
    propose_retrying,
    sm,
    until,
    wait_applied,
    wait_leader,
)


class _Damaged(Exception):
    storage_damage = True


class _OnceDamaged(AppendLog):
    """Reports damage (once) when it applies ``poison``, like a state machine whose file
    failed its checksum during a read."""

    def __init__(self, poison: bytes) -> None:
        super().__init__()
        self.poison = poison
        self.armed = False
        self.fired = False

    def apply(self, index: int, command: bytes) -> object:
        if command == self.poison and self.armed and not self.fired:
            self.fired = True
            raise _Damaged(f"entry {index}: a file of this replica failed its checksum")
        return super().apply(index, command)


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


async def _load(nodes: dict[int, MultiRaft], start: int, count: int) -> None:
    for k in range(start, start + count):
        await propose_retrying(nodes, 1, b"c%d" % k)


async def _restart(nodes: dict[int, MultiRaft], nid: int, *, enabled: bool) -> None:
    old = nodes[nid]
    cfg = dataclasses.replace(
        old.cfg, wal_options=dataclasses.replace(old.cfg.wal_options, salvage=enabled)
    )
    nodes[nid] = MultiRaft(cfg)
    nodes[nid].repairs.enabled = enabled
    await nodes[nid].start()
    for g in (1, 2, 3):
        await nodes[nid].open_group(g, AppendLog(), voters=list(nodes))


def _same(nodes: dict[int, MultiRaft]) -> bool:
    seqs = [sm(nd, 1).commands for nd in nodes.values()]
    return seqs[0] == seqs[1] == seqs[2]


async def _repaired(nodes: dict[int, MultiRaft], nid: int, total: int) -> None:
    await _load(nodes, 10_000, 3)
    await wait_applied(nodes, 1, total + 3)
    repairs = nodes[nid].repairs
    assert await until(
        lambda: _same(nodes) and not repairs.stats().under_repair and repairs.completed >= 1
    )
    assert not (Path(nodes[nid].cfg.data_dirs[0]) / REPAIR_FILE).exists()


@pytest.mark.parametrize("enabled", [True, False])
async def test_a_damaged_snapshot_file_is_repaired_from_the_replicas(
    tmp_path: Path, enabled: bool
) -> None:
    nodes = make_nodes(tmp_path, snapshot_entries=40, keep_entries=5)
    await open_all(nodes)
    async with closing(nodes):
        await _load(nodes, 0, 100)
        await wait_applied(nodes, 1, 100)
        victim = 3
        await nodes[victim].close()
        snaps = sorted((tmp_path / f"n{victim}" / "snap").glob(f"{1:020d}-*.snap"))
        assert snaps
        _flip(snaps[-1], os.path.getsize(snaps[-1]) - 3)
        await _load({k: v for k, v in nodes.items() if k != victim}, 100, 20)
        if not enabled:
            with pytest.raises(CorruptRecord, match="snap"):
                await _restart(nodes, victim, enabled=False)
            return
        await _restart(nodes, victim, enabled=True)
        assert nodes[victim].repairs.started == 1
        await _repaired(nodes, victim, 120)


async def test_wal_damage_before_the_tail_is_cut_and_the_groups_repaired(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path)
    await open_all(nodes)
    async with closing(nodes):
        await _load(nodes, 0, 60)
        await wait_applied(nodes, 1, 60)
        victim = 2
        await nodes[victim].close()
        wal = sorted((tmp_path / f"n{victim}").glob("wal-*.log"))[-1]
        _flip(wal, os.path.getsize(wal) // 2)
        await _restart(nodes, victim, enabled=True)
        under = dict(nodes[victim].repairs.stats().under_repair)
        assert set(under) <= {1, 2, 3} and 1 in under, under
        assert "WAL damaged" in under[1]
        await _repaired(nodes, victim, 60)


async def test_damage_reported_while_running_resets_and_rejoins(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, snapshot_entries=30, keep_entries=5)
    for nd in nodes.values():
        await nd.start()
        nd.repairs.enabled = True
        for g in (1, 2, 3):
            await nd.open_group(
                g, _OnceDamaged(b"c50") if g == 1 else AppendLog(), voters=[1, 2, 3]
            )
    async with closing(nodes):
        leader = await wait_leader(nodes, 1)
        victim = next(n for n in nodes if n != leader)
        machine = nodes[victim].group(1).sm
        assert isinstance(machine, _OnceDamaged)
        machine.armed = True
        await _load(nodes, 0, 80)
        # The victim halted on entry c50, was reset and caught up from a snapshot of the others.
        assert await until(lambda: nodes[victim].repairs.completed == 1)
        assert machine.fired
        await _repaired(nodes, victim, 80)
        assert sm(nodes[victim], 1).commands.count(b"c50") == 1


async def test_a_leader_hands_over_to_its_best_voter_and_avoids_who_it_is_told(
    tmp_path: Path,
) -> None:
    """`GroupDriver.hand_over` (what a repair, a stepped clock and a slow disk use): the leader
    asks a caught-up voter not in ``avoid``; a follower asks nobody."""
    nodes = make_nodes(tmp_path)
    await open_all(nodes)
    async with closing(nodes):
        await _load(nodes, 0, 5)
        await wait_applied(nodes, 1, 5)
        leader = await wait_leader(nodes, 1)
        follower = next(n for n in nodes if n != leader)
        assert nodes[follower].group(1).hand_over() == 0
        others = [n for n in nodes if n != leader]
        assert await until(
            lambda: all(nodes[leader].group(1).status().peers[p].recent_active for p in others)
        )
        asked = nodes[leader].group(1).hand_over(avoid={others[0]})
        assert asked == others[1]
        assert await until(lambda: nodes[others[1]].group(1).status().role.name == "LEADER")
