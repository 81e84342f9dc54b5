"""`cmq.node.diskwatch`: the verdict on a data directory (`assess`, pure) and what the watch does
for each (halt, refuse sends, hand off leadership), with a stand-in runtime."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any, cast

import pytest

from cmq.errors import DiskFull
from cmq.node.diskwatch import DiskPolicy, DiskWatch, assess
from raftlog.errors import DiskFailed, RaftError
from raftlog.runtime import MultiRaft, RuntimeConfig
from raftlog.runtime.applog import AppendLog
from raftlog.storage import Wal
from raftlog.storage.walstats import WalCounters, WalStats
from raftlog.transport.peer import Address
from tests.ports import free_ports

POLICY = DiskPolicy(reserve_bytes=1000, slow_fsync_seconds=2.0)


def stats(**changes: Any) -> WalStats:
    c = WalCounters()
    for k, v in changes.items():
        setattr(c, k, v)
    return c.stats(1)


def test_assess_each_state() -> None:
    ok = assess("/d", stats(last_fsync_seconds=0.01), 5000, POLICY, 100.0)
    assert ok.state == "ok" and not ok.full and not ok.slow
    assert assess("/d", stats(), None, POLICY, 100.0).state == "ok"  # free space unknown
    full = assess("/d", stats(), 999, POLICY, 100.0)
    assert full.state == "full" and full.full
    hung = assess("/d", stats(fsync_started=90.0), 5000, POLICY, 100.0)
    assert hung.state == "slow" and hung.fsync_seconds == 10.0
    assert assess("/d", stats(last_fsync_seconds=2.5), 5000, POLICY, 100.0).slow
    # A young fsync after a slow one: still slow (the disk has not shown it is fast again).
    assert assess("/d", stats(last_fsync_seconds=2.5, fsync_started=99.9), 0, POLICY, 100.0).slow
    failed = assess("/d", stats(failed="EIO: x", failed_errno=5, fsync_started=1.0), 0, POLICY, 9)
    assert failed.state == "failed" and not failed.slow and failed.failed_errno == errno.EIO
    by_file = assess(
        "/d", stats(), 5000, POLICY, 1.0, file_error=OSError(errno.EIO, "Input/output error")
    )
    assert by_file.state == "failed" and by_file.failed.startswith("EIO")
    assert failed.describe()["state"] == "failed" and failed.describe()["errno"] == 5


class FakeDriver:
    """A group's driver: led by ``leader``; `hand_over` (the real one picks the most caught-up
    voter, `raftlog.runtime.group.GroupDriver.hand_over`) asks node 3 when led by node 1."""

    def __init__(self, group: int, leader: int, transfers: list[tuple[int, int]]) -> None:
        self.stopped: BaseException | None = None
        self.group = group
        self._leader = leader
        self._transfers = transfers

    def halt(self, exc: BaseException) -> None:
        self.stopped = exc

    def leader(self) -> int:
        return self._leader

    def hand_over(self, avoid: Any = ()) -> int:
        if self._leader != 1:
            return 0
        self._transfers.append((self.group, 3))
        return 3


class FakeWal:
    def __init__(self) -> None:
        self.s = stats()

    def stats(self) -> WalStats:
        return self.s


class FakeRaft:
    def __init__(self) -> None:
        self.wals = [FakeWal(), FakeWal()]
        self.transfers: list[tuple[int, int]] = []
        self.groups = {
            g: FakeDriver(g, leader, self.transfers) for g, leader in ((1, 1), (2, 1), (3, 2))
        }

    def dir_for(self, group: int) -> int:
        return 0 if group in (1, 3) else 1

    def halted(self) -> dict[int, BaseException]:
        return {g: d.stopped for g, d in self.groups.items() if d.stopped is not None}


async def inline(f: Any, *args: Any) -> Any:
    return f(*args)


def watch(raft: FakeRaft, free: dict[str, int], now: float = 100.0) -> DiskWatch:
    return DiskWatch(
        1,
        cast(MultiRaft, raft),
        ["/a", "/b"],
        POLICY,
        offload=cast(Any, inline),
        probe=lambda d: free[d],
        monotonic=lambda: now,
    )


async def test_a_failed_directory_halts_its_groups_only() -> None:
    raft = FakeRaft()
    raft.wals[0].s = stats(failed="EIO: boom", failed_errno=5)
    w = watch(raft, {"/a": 10_000, "/b": 10_000})
    health = await w.check()
    assert [h.state for h in health] == ["failed", "ok"]
    assert isinstance(raft.groups[1].stopped, DiskFailed)
    assert isinstance(raft.groups[3].stopped, DiskFailed)
    assert raft.groups[2].stopped is None  # the other directory keeps working
    assert not w.ok()
    assert w.refuse_send(2) is None


async def test_a_full_directory_refuses_sends_of_its_groups() -> None:
    raft = FakeRaft()
    w = watch(raft, {"/a": 10_000, "/b": 10})
    await w.check()
    refused = w.refuse_send(2)
    assert isinstance(refused, DiskFull) and "reserve" in refused.message
    assert w.refuse_send(1) is None and w.refuse_send(99) is None
    assert w.ok() and w.refused_sends == 1


async def test_a_slow_directory_hands_off_the_groups_led_here() -> None:
    raft = FakeRaft()
    raft.wals[0].s = stats(fsync_started=95.0)
    w = watch(raft, {"/a": 10_000, "/b": 10_000})
    await w.check()
    # Group 1 (led here, on /a) goes to the most caught-up other voter; group 3 is not led
    # here and group 2 is on the healthy directory.
    assert raft.transfers == [(1, 3)] and w.handoffs == 1


async def test_a_stuck_probe_keeps_the_last_answer() -> None:
    raft = FakeRaft()
    answers = {"/a": 10_000, "/b": 10_000}
    w = watch(raft, answers)
    await w.check()

    async def stuck(f: Any, *args: Any) -> Any:
        await asyncio.sleep(3600)

    w._offload = cast(Any, stuck)
    health = await w.check()
    assert [h.free_bytes for h in health] == [10_000, 10_000]


async def test_a_failed_wal_stops_its_directory_and_the_other_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real one-node `MultiRaft` with two data directories: the first one's fsync fails
    (EIO). Its group's write fails with `DiskFailed`, the watch judges it failed and halts the
    group; the group on the second directory keeps committing."""
    addr = Address("127.0.0.1", free_ports(1)[0])
    dirs = (str(tmp_path / "d0"), str(tmp_path / "d1"))
    raft = MultiRaft(
        RuntimeConfig(
            node_id=1, listen=addr, peers={1: addr}, secret=b"s", data_dirs=dirs, tick_interval=0.01
        )
    )
    await raft.start()
    try:
        for g in (1, 2):
            await raft.open_group(g, AppendLog(), voters=[1], data_dir=g - 1)
        for g in (1, 2):
            await until_leader(raft, g)
            await raft.propose(g, b"before", timeout=5)
        real = Wal._sync

        def failing(self: Wal, fd: int) -> None:
            if self.directory == os.path.abspath(dirs[0]):
                raise OSError(errno.EIO, "Input/output error")
            real(self, fd)

        monkeypatch.setattr(Wal, "_sync", failing)
        with pytest.raises(RaftError):
            await raft.propose(1, b"lost", timeout=5)
        w = DiskWatch(1, raft, dirs, POLICY, offload=asyncio.to_thread, probe=lambda d: 10**9)
        health = await w.check()
        assert [h.state for h in health] == ["failed", "ok"]
        assert health[0].failed_errno == errno.EIO
        assert health[0].directory == os.path.abspath(dirs[0])
        assert isinstance(raft.groups[1].stopped, DiskFailed)
        assert raft.leader_of(1) == 0  # a stopped replica leads nothing
        assert await raft.propose(2, b"after", timeout=5) is not None
        assert raft.groups[2].stopped is None and not w.ok()
        halted = raft.halted()  # kept as groups halt: the watch walks no healthy group
        assert list(halted) == [1] and isinstance(halted[1], DiskFailed)
    finally:
        monkeypatch.undo()
        await raft.close()


async def until_leader(raft: MultiRaft, group: int) -> None:
    for _ in range(500):
        if raft.leader_of(group) == 1:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"group {group} elected no leader")
