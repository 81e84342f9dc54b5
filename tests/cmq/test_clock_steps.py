"""`ClockGuard` catches a step of its own clock at once (before a peer reading can), absorbs
drift within the bound, and trusts a stepped clock again only once readings taken after the
step agree with it. Fake clocks and a fake runtime (no groups led)."""

from __future__ import annotations

from typing import cast

import pytest

from cmq.clockguard import ClockGuard
from cmq.errors import InvalidParameter
from cmq.rpc import decode_call as decode_forwarded
from raftlog.runtime import MultiRaft
from raftlog.runtime.clocks import ClockReading
from raftlog.transport.codec import encode_clock_ping


class FakeRaft:
    def __init__(self) -> None:
        self.readings: list[ClockReading] = []
        self.groups: dict[int, object] = {}

    def clock_readings(self) -> tuple[ClockReading, ...]:
        return tuple(self.readings)


def test_steps_are_caught_at_once_and_cleared_by_later_readings() -> None:
    mono = [100.0]
    wall = [1_000_000]
    raft = FakeRaft()
    guard = ClockGuard(
        1,
        cast(MultiRaft, raft),
        500,
        clock=lambda: mono[0],
        wall_ms=lambda: wall[0] + round(mono[0] * 1000),
    )
    raft.readings = [ClockReading(2, 0, 1, 100.0), ClockReading(3, 0, 1, 100.0)]
    assert guard.trusted() and not guard.check().unsafe
    mono[0] += 0.5
    wall[0] += 200  # drift within the bound: absorbed at the next check
    assert guard.trusted()
    guard.check()
    wall[0] += 3_600_000  # an hour forward: not trusted before any peer reading shows it
    assert not guard.trusted() and guard.stepped()
    assert guard.describe()["unsafe"] is True
    mono[0] += 0.5
    guard.check()  # notes the step
    mono[0] += 0.5
    raft.readings = [
        ClockReading(2, -3_600_000, 1, mono[0]),
        ClockReading(3, -3_600_000, 1, mono[0]),
    ]
    guard.check()
    assert not guard.trusted() and guard.unsafe()
    wall[0] -= 3_600_000  # back: trusted once post-step readings agree
    mono[0] += 0.5
    raft.readings = [ClockReading(2, 0, 1, mono[0]), ClockReading(3, 0, 1, mono[0])]
    guard.check()
    assert guard.trusted()


def test_a_step_the_peers_confirm_is_accepted() -> None:
    """E.g. a clock that was wrong and is stepped right: the peers agree with the new time."""
    mono = [10.0]
    wall = [5_000]
    raft = FakeRaft()
    guard = ClockGuard(
        1,
        cast(MultiRaft, raft),
        500,
        clock=lambda: mono[0],
        wall_ms=lambda: wall[0] + round(mono[0] * 1000),
    )
    wall[0] += 10_000
    guard.check()
    assert not guard.trusted()
    mono[0] += 0.5
    raft.readings = [ClockReading(2, 3, 1, mono[0]), ClockReading(3, -2, 1, mono[0])]
    guard.check()
    assert guard.trusted()


def test_an_older_node_refuses_a_probe_as_a_call_instead_of_dropping_the_connection() -> None:
    """A node without probes decodes the payload as a forwarded call: 0xc1 is never valid
    MessagePack, so its decoder refuses it (an error reply), never a frame-level error."""
    with pytest.raises(InvalidParameter):
        decode_forwarded(encode_clock_ping(5))
