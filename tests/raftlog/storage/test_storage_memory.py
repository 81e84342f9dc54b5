"""`MemoryDisk`, the in-memory twin of a data directory's WAL: durability only after the batch
"fsync", power loss keeping a prefix of the unsynced records, drains on close, drops, dead
incarnations, and the planted early-ack bug."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from raftlog.core import ConfState, Entry, HardState
from raftlog.errors import InvariantViolation, WalClosed
from raftlog.sim.vloop import VirtualTimeLoop
from raftlog.storage.memory import MemoryDiskOptions, MemoryDisks

CONF = ConfState((1, 2, 3))


@pytest.fixture
def loop() -> Iterator[VirtualTimeLoop]:
    lp = VirtualTimeLoop()
    yield lp
    lp.close()


def ents(lo: int, hi: int, term: int = 1) -> list[Entry]:
    return [Entry(term, i, data=b"x%d" % i) for i in range(lo, hi + 1)]


def settle(loop: VirtualTimeLoop, seconds: float = 0.1) -> None:
    loop.advance(seconds)


def test_writes_are_durable_and_visible_only_once_their_batch_completes(
    loop: VirtualTimeLoop,
) -> None:
    disks = MemoryDisks(loop, random.Random(1))
    disk = disks("d")
    log = disk.open_group(1, CONF)
    assert log.snapshot().meta.index == 1 and disk.groups() == (1,)
    fut = log.submit_ready(entries=ents(2, 4), hard_state=HardState(1, 1, 0))
    assert not fut.done() and log.last_index() == 1 and disk.unsynced() == 2
    settle(loop)
    assert fut.result() is None and log.last_index() == 4
    durable = disk.durable(1)
    assert durable is not None and durable.last_index() == 4 and disk.unsynced() == 0
    assert disk.stats().fsyncs >= 1 and disk.stats().submissions == 1


def test_a_gap_is_refused_at_submission(loop: VirtualTimeLoop) -> None:
    log = MemoryDisks(loop, random.Random(1))("d").open_group(1, CONF)
    with pytest.raises(InvariantViolation):
        log.submit_ready(entries=ents(5, 6))


def test_power_loss_keeps_a_prefix_of_the_unsynced_records_and_the_disk_survives(
    loop: VirtualTimeLoop,
) -> None:
    kept_counts = set()
    for seed in range(40):
        disks = MemoryDisks(loop, random.Random(seed))
        disk = disks("d")
        log = disk.open_group(1, CONF)
        log.submit_ready(entries=ents(2, 3))
        settle(loop)
        futs = [log.submit_ready(entries=ents(i, i)) for i in range(4, 9)]
        loss = disk.power_loss()
        kept_counts.add(loss.kept)
        assert loss.kept + loss.lost == 5
        settle(loop)
        assert not any(f.done() for f in futs)  # the process is gone: nobody is told
        log2 = disks("d").open_group(1, None)
        assert log2.last_index() == 3 + loss.kept  # a prefix, in order
        # The dead incarnation's log writes nowhere.
        late = log.submit_ready(entries=ents(9, 9))
        settle(loop)
        assert not late.done() and log2.last_index() == 3 + loss.kept
    assert len(kept_counts) > 2


def test_close_drains_and_reopening_an_open_disk_is_refused(loop: VirtualTimeLoop) -> None:
    disks = MemoryDisks(loop, random.Random(3))
    disk = disks("d")
    log = disk.open_group(1, CONF)
    fut = log.submit_ready(entries=ents(2, 5))
    with pytest.raises(InvariantViolation):
        disks("d")
    disk.close()
    assert fut.done() and disk.unsynced() == 0
    with pytest.raises(WalClosed):
        log.submit_ready(entries=ents(6, 6))
    assert disks("d").open_group(1, CONF).last_index() == 5


def test_snapshots_compact_and_a_drop_forgets_the_group(loop: VirtualTimeLoop) -> None:
    disks = MemoryDisks(loop, random.Random(4))
    disk = disks("d")
    log = disk.open_group(1, CONF)
    log.submit_ready(entries=ents(2, 10))
    settle(loop)
    snap, fut = log.submit_create_snapshot(8, CONF, b"image")
    settle(loop)
    assert fut.done() and log.snapshot() == snap
    log.compact(8)
    assert log.first_index() == 9
    disk.power_loss()
    again = disks("d").open_group(1, None)
    assert again.snapshot().data == b"image" and again.first_index() == 9
    assert again.last_index() == 10
    dropped: Future[None] = disk.drop_group(1)
    settle(loop)
    assert dropped.done() and disk.groups() == () and disk.durable(1) is None


def test_the_planted_early_ack_reports_unsynced_writes_durable(loop: VirtualTimeLoop) -> None:
    disks = MemoryDisks(loop, random.Random(5), MemoryDiskOptions(unsafe_early_ack=True))
    disk = disks("d")
    log = disk.open_group(1, CONF)
    fut = log.submit_ready(entries=ents(2, 4))
    assert fut.done() and log.last_index() == 4 and disk.unsynced() == 1


def test_completions_run_on_the_loop_in_submission_order(loop: VirtualTimeLoop) -> None:
    disk = MemoryDisks(loop, random.Random(6))("d")
    a, b = disk.open_group(1, CONF), disk.open_group(2, CONF)
    order: list[int] = []

    async def main() -> None:
        futs = [
            (g, log.submit_ready(entries=ents(i, i)))
            for i in range(2, 6)
            for g, log in ((1, a), (2, b))
        ]
        for g, f in futs:
            await asyncio.wrap_future(f)
            order.append(g)

    loop.run_until_complete(main())
    assert order == [1, 2] * 4 and a.last_index() == b.last_index() == 5
