"""The scrubber's pace: each file read counts for at least `FILE_CHARGE` bytes against the rate,
so many small snapshot files are read at the rate's pace, not in one burst (a stand-in runtime)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from cmq.node import scrubber as scrubber_mod
from cmq.node.scrubber import FILE_CHARGE, Scrubber
from raftlog.runtime import MultiRaft

SNAPSHOT = 300
"""Bytes of each stand-in snapshot: an idle group's is a few hundred."""


class _Repairs:
    def under_way(self, group: int) -> bool:
        return False


class _Raft:
    def __init__(self, groups: int) -> None:
        self.groups = {g: object() for g in range(1, groups + 1)}
        self.repairs = _Repairs()

    async def verify_snapshot(self, group: int) -> int:
        return SNAPSHOT


async def _pass(groups: int, rate: float, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(scrubber_mod.asyncio, "sleep", sleep)
    s = Scrubber(cast(MultiRaft, _Raft(groups)), {}, rate=rate, offload=cast(Any, None))
    await s.scrub_pass()
    st = s.stats()
    assert (st.snapshots, st.bytes, st.passes) == (groups, groups * SNAPSHOT, 1)
    return waits


async def test_small_snapshots_are_read_at_the_rate_counting_a_chunk_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rate = FILE_CHARGE * 100.0  # 100 files a second
    waits = await _pass(50, rate, monkeypatch)
    # 50 files of 300 bytes: paced as 50 chunks (about half a second), not as 15 KB (~nothing).
    assert len(waits) == 50
    assert sum(waits) > 0.45
    assert all(w <= FILE_CHARGE / rate for w in waits)


async def test_a_direct_pass_with_rate_zero_is_not_paced(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _pass(50, 0, monkeypatch) == []
