"""`ClockGuard` catches a step of its own clock at once (before a peer reading can), absorbs
drift within the bound, and trusts a stepped clock again only once readings taken after the
step agree with it; a clock is not trusted before its peers confirmed it once after the start
(a node may boot with its clock already wrong); `stamp` checks the very reading it returns.
Fake clocks and a fake runtime (no groups led)."""

from __future__ import annotations

from typing import cast

import pytest

from cmq.errors import InvalidParameter, Unavailable
from cmq.fsm.commands import Produce, decode_command
from cmq.model import OutgoingMessage
from cmq.node.clockguard import ClockGuard
from cmq.routing.produce import ProduceBuilder
from cmq.routing.rpc import decode_call as decode_forwarded
from raftlog.runtime import MultiRaft
from raftlog.runtime.clocks import ClockReading
from raftlog.transport.codec import encode_clock_ping


class FakeRaft:
    def __init__(self, peers: tuple[int, ...] = (2, 3)) -> None:
        self.readings: list[ClockReading] = []
        self.groups: dict[int, object] = {}
        self.peer_ids = peers

    def peers_read(self, at: float, offset: int = 0) -> None:
        """Peers 2 and 3 read at ``at`` (monotonic seconds), their clocks ``offset`` ms from
        this node's."""
        self.readings = [ClockReading(2, offset, 1, at), ClockReading(3, offset, 1, at)]

    def clock_readings(self) -> tuple[ClockReading, ...]:
        return tuple(self.readings)

    def peers(self) -> tuple[int, ...]:
        return self.peer_ids


class FakeClock:
    """Monotonic ``mono[0]`` seconds; the wall clock ``wall[0]`` ms ahead of it."""

    def __init__(self, mono: list[float], wall: list[int]) -> None:
        self.mono, self.wall = mono, wall

    def monotonic(self) -> float:
        return self.mono[0]

    def wall_ms(self) -> int:
        return self.wall[0] + round(self.mono[0] * 1000)


def _guard(
    raft: FakeRaft, mono: list[float], wall: list[int], *, confirm: bool = True
) -> ClockGuard:
    """A guard over fake clocks; ``confirm``: its start is confirmed by two agreeing peers."""
    guard = ClockGuard(1, cast(MultiRaft, raft), 500, clock=FakeClock(mono, wall))
    if confirm:
        mono[0] += 0.5
        raft.peers_read(mono[0])
        guard.check()
        assert guard.trusted()
    return guard


def test_steps_are_caught_at_once_and_cleared_by_later_readings() -> None:
    mono = [100.0]
    wall = [1_000_000]
    raft = FakeRaft()
    guard = _guard(raft, mono, wall)
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
    raft.peers_read(mono[0], -3_600_000)
    guard.check()
    assert not guard.trusted() and guard.unsafe()
    wall[0] -= 3_600_000  # back: trusted once post-step readings agree
    mono[0] += 0.5
    raft.peers_read(mono[0])
    guard.check()
    assert guard.trusted()


def test_a_step_the_peers_confirm_is_accepted() -> None:
    """E.g. a clock that was wrong and is stepped right: the peers agree with the new time."""
    mono = [10.0]
    wall = [5_000]
    raft = FakeRaft()
    guard = _guard(raft, mono, wall)
    wall[0] += 10_000
    guard.check()
    assert not guard.trusted()
    mono[0] += 0.5
    raft.readings = [ClockReading(2, 3, 1, mono[0]), ClockReading(3, -2, 1, mono[0])]
    guard.check()
    assert guard.trusted()


def test_a_node_that_starts_with_its_clock_off_stamps_nothing_until_confirmed() -> None:
    """The start-up gap: no earlier reading to detect a step against. A node booted two hours
    ahead is not trusted until its peers' readings confirm it; a node booted right is, once."""
    mono = [50.0]
    wall = [7_200_000]  # two hours ahead of its peers from the first reading
    raft = FakeRaft()
    guard = _guard(raft, mono, wall, confirm=False)
    assert not guard.trusted() and guard.stamp() is None
    assert guard.describe()["verified"] is False
    mono[0] += 0.5
    guard.check()  # no readings yet
    assert guard.stamp() is None
    # One peer answers: its reading disagrees, and one reading alone cannot tell who is off.
    raft.readings = [ClockReading(2, -7_200_000, 1, mono[0])]
    mono[0] += 0.5
    guard.check()
    assert guard.stamp() is None
    # Both peers: the median says this node is off.
    raft.readings.append(ClockReading(3, -7_200_000, 1, mono[0]))
    mono[0] += 0.5
    guard.check()
    assert guard.stamp() is None and guard.unsafe()
    # The clock is set right (a step back): trusted once readings after that agree.
    wall[0] -= 7_200_000
    mono[0] += 0.5
    guard.check()
    assert guard.stamp() is None
    mono[0] += 0.1  # readings taken after the check that saw the step (at that very moment,
    # they could have been taken before it)
    raft.readings = [ClockReading(2, 3, 1, mono[0]), ClockReading(3, -4, 1, mono[0])]
    mono[0] += 0.4
    guard.check()
    assert guard.trusted() and guard.stamp() == wall[0] + round(mono[0] * 1000)


def test_readings_from_before_the_start_do_not_confirm_it() -> None:
    mono = [10.0]
    wall = [0]
    raft = FakeRaft()
    raft.readings = [ClockReading(2, 0, 1, 9.0), ClockReading(3, 0, 1, 9.5)]
    guard = _guard(raft, mono, wall, confirm=False)
    mono[0] += 0.5
    guard.check()
    assert not guard.trusted()


def test_a_node_without_peers_is_trusted_at_once() -> None:
    guard = _guard(FakeRaft(peers=()), [1.0], [0], confirm=False)
    assert guard.trusted() and guard.stamp() == 1000 and guard.confirmed_now()


def test_stamp_checks_the_reading_it_returns() -> None:
    """A check and a second reading could straddle a step: `stamp` reads once. Here the clock
    steps between two readings; the second (the stamp) must not carry the step."""
    mono = [10.0]
    wall = [0]
    raft = FakeRaft()
    guard = _guard(raft, mono, wall)
    readings = iter([0, 3_600_000])

    def stepping_wall() -> int:
        return next(readings) + round(mono[0] * 1000)

    guard._wall_ms = stepping_wall  # the first reading is before the step, the next after
    # A stamp that checked trust on one reading and returned another would carry the step.
    assert guard.stamp() == 10_500  # mono 10.5 s after the confirming check
    assert guard.stamp() is None  # the next reading is the stepped one: refused


def test_confirmed_now_needs_an_agreeing_peer_reading() -> None:
    mono = [10.0]
    wall = [0]
    raft = FakeRaft()
    guard = _guard(raft, mono, wall)
    assert guard.confirmed_now()
    raft.readings = [ClockReading(2, 9_000, 1, mono[0])]  # the only peer heard disagrees
    assert guard.trusted() and not guard.confirmed_now()


def test_an_older_node_refuses_a_probe_as_a_call_instead_of_dropping_the_connection() -> None:
    """A node without probes decodes the payload as a forwarded call: 0xc1 is never valid
    MessagePack, so its decoder refuses it (an error reply), never a frame-level error."""
    with pytest.raises(InvalidParameter):
        decode_forwarded(encode_clock_ping(5))


def test_a_step_just_before_the_first_confirmation_is_not_confirmed() -> None:
    """Readings of the clock as it was before a step confirm nothing about the stepped clock:
    a node started cut off (unverified) whose clock steps a minute back just before the check
    that would have confirmed it stays untrusted (the whole-node simulator's seed 11027)."""
    mono = [100.0]
    wall = [1_000_000]
    raft = FakeRaft()
    guard = _guard(raft, mono, wall, confirm=False)
    mono[0] += 0.5
    guard.check()  # no readings yet: unverified
    mono[0] += 0.4
    raft.peers_read(mono[0])
    wall[0] -= 60_000  # the step, after those readings
    mono[0] += 0.1
    guard.check()
    assert not guard.trusted() and guard.stamp() is None
    mono[0] += 0.5
    raft.peers_read(mono[0], 60_000)
    guard.check()
    assert not guard.trusted()
    wall[0] += 60_000  # back: confirmed by readings taken after
    mono[0] += 0.5
    guard.check()
    mono[0] += 0.5
    raft.peers_read(mono[0])
    guard.check()
    assert guard.trusted()


def test_a_second_step_while_a_first_awaits_confirmation_restarts_the_wait() -> None:
    mono = [100.0]
    wall = [1_000_000]
    raft = FakeRaft()
    guard = _guard(raft, mono, wall)
    wall[0] += 60_000
    mono[0] += 0.5
    guard.check()  # notes the step
    wall[0] -= 60_000  # back to the right time...
    mono[0] += 0.2
    raft.peers_read(mono[0])
    wall[0] -= 60_000  # ...and a minute back, after readings of the right clock
    mono[0] += 0.3
    guard.check()
    assert not guard.trusted() and guard.stamp() is None


def test_deadlines_are_converted_only_at_a_trusted_reading() -> None:
    """A node whose clock just stepped back 29 minutes must not turn "deliver at T" into a
    29-minute delay (a chaos seed found it so): a send with an absolute deadline is refused
    `Unavailable` (the client sends through another node) while the guard vouches for no
    reading; relative delays never depended on this clock and pass."""
    mono = [100.0]
    wall = [1_000_000]
    raft = FakeRaft()
    clock = FakeClock(mono, wall)
    guard = _guard(raft, mono, wall)
    builder = ProduceBuilder(2, clock, guard.stamp)
    now = clock.wall_ms()

    def delays(messages: list[OutgoingMessage]) -> list[tuple[int | None, int | None]]:
        call = builder.build(1, "q", messages)
        produce = decode_command(call.command)
        assert isinstance(produce, Produce)
        return [(m.delay_ms, m.ttl_ms) for m in produce.messages]

    at = OutgoingMessage(b"x", deliver_at_ms=now + 2_000)
    ttl = OutgoingMessage(b"y", ttl_deadline_ms=now + 9_000)
    assert delays([at, ttl]) == [(2_000, None), (None, 9_000)]
    wall[0] -= 29 * 60_000  # the step; no peer reading has shown it yet
    for msgs in ([at], [ttl], [OutgoingMessage(b"z"), at]):
        with pytest.raises(Unavailable):
            builder.build(1, "q", msgs)
    assert delays([OutgoingMessage(b"z", delay_seconds=3)]) == [(3_000, None)]
    # Planted: the builder without the guard converts at the stepped clock.
    unguarded = ProduceBuilder(2, clock).build(1, "q", [at])
    planted = decode_command(unguarded.command)
    assert isinstance(planted, Produce)
    assert planted.messages[0].delay_ms == 29 * 60_000 + 2_000
