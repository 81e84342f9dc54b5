"""Shipping a snapshot to a follower without the segment files: the image plus its segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from cmq.errors import InvariantBroken
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import FileSegmentStore, MemorySegmentStore
from tests.cmq.fsm.harness import two_queues

T0 = 1_700_000_000_000


def populated(store: MemorySegmentStore | FileSegmentStore) -> QueueMachine:
    return two_queues(store, segment_bytes=4096, messages=50, padding=200)


def test_shipped_image_restores_on_an_empty_store(tmp_path: Path) -> None:
    leader = populated(FileSegmentStore(str(tmp_path / "leader")))
    light = leader.snapshot()
    shipped = leader.export_snapshot(light)
    assert len(shipped) > len(light) + 2 * 50 * 200  # the segments travel with it
    follower = QueueMachine(FileSegmentStore(str(tmp_path / "follower")))
    follower.restore(7, shipped)
    for q in ("a", "b"):
        assert follower.stats(q, T0 + 200) == leader.stats(q, T0 + 200)
        seqs = list(range(1, 51))
        assert [s.body for s in follower.read(q, seqs)] == [s.body for s in leader.read(q, seqs)]
    assert follower.snapshot() == light  # the follower's own snapshots are light again
    # A light image alone cannot be restored there: the segments are missing (loudly).
    with pytest.raises(InvariantBroken):
        QueueMachine(FileSegmentStore(str(tmp_path / "empty"))).restore(7, light)


def test_damaged_shipment_is_refused() -> None:
    leader = populated(MemorySegmentStore())
    shipped = bytearray(leader.export_snapshot(leader.snapshot()))
    shipped[-10] ^= 0xFF  # inside the last segment's bytes
    with pytest.raises(InvariantBroken):
        QueueMachine(MemorySegmentStore()).restore(7, bytes(shipped))
    with pytest.raises(InvariantBroken):
        QueueMachine(MemorySegmentStore()).restore(7, bytes(shipped[:-500]))
