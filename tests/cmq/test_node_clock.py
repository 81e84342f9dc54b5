"""A node's one clock (`cmq.routing.clock.NodeClock`): built from the environment when the node
is built (never at import), its wall clock shifted by the chaos hooks (``CMQ_CLOCK_OFFSET_MS``,
the live ``CMQ_CLOCK_FILE``, whose drift runs on the node clock's own monotonic time), and read
by every part of the node."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cmq.errors import InvalidParameter
from cmq.fsm.commands import Produce, decode_command
from cmq.model import OutgoingMessage
from cmq.node.queue_node import QueueNode
from cmq.routing.clock import NodeClock, node_clock
from tests.cmq.helpers import configs


class FakeBase:
    """A base clock that moves only when a test moves it."""

    def __init__(self, mono: float, wall: int) -> None:
        self.mono, self.wall = mono, wall

    def monotonic(self) -> float:
        return self.mono

    def wall_ms(self) -> int:
        return self.wall


def system_ms() -> int:
    return time.time_ns() // 1_000_000


def test_the_environment_is_read_when_the_clock_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CMQ_CLOCK_OFFSET_MS", "-7000")
    before = system_ms()
    ms = node_clock().wall_ms()
    assert before - 7000 <= ms <= system_ms() - 7000
    monkeypatch.delenv("CMQ_CLOCK_OFFSET_MS")
    before = system_ms()
    assert before <= node_clock().wall_ms() <= system_ms()
    with pytest.raises(InvalidParameter, match="CMQ_CLOCK_OFFSET_MS must be an integer"):
        node_clock({"CMQ_CLOCK_OFFSET_MS": "soon"})


def test_without_hooks_the_clock_is_its_base() -> None:
    base = FakeBase(5.0, 1_000_000)
    clock = node_clock({}, base)
    assert isinstance(clock, NodeClock)
    assert (clock.monotonic(), clock.wall_ms()) == (5.0, 1_000_000)


def test_a_clock_file_jumps_and_drifts_the_wall_clock_on_its_own_time(tmp_path: Path) -> None:
    path = tmp_path / "clock.json"
    base = FakeBase(100.0, 1_000_000)
    clock = node_clock({"CMQ_CLOCK_FILE": str(path), "CMQ_CLOCK_OFFSET_MS": "5"}, base)
    assert clock.wall_ms() == 1_000_005  # no file yet: no fault
    path.write_text(json.dumps({"offset_ms": -3_600_000}))
    assert clock.wall_ms() == 1_000_005  # re-read at most once a second
    base.mono += 1.0
    assert clock.wall_ms() == 1_000_005 - 3_600_000
    path.write_text(json.dumps({"offset_ms": 0, "drift_ppm": 100_000}))  # 10 % fast
    base.mono += 1.0
    start = clock.wall_ms()
    assert start == 1_000_005
    base.mono += 10.0
    assert clock.wall_ms() - start == 1_000  # 10 % of 10 s of the base's monotonic time


async def test_every_part_of_a_node_reads_its_one_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CMQ_CLOCK_OFFSET_MS", "-7000")
    before = system_ms()
    node = QueueNode(configs(tmp_path)[1])
    monkeypatch.delenv("CMQ_CLOCK_OFFSET_MS")  # read once, when the node was built
    # The Raft host's clock, what its clock probes report and what the commands built here
    # carry: the one clock.
    assert node.raft.clock is node.clock_source
    assert before - 7000 <= node.raft.watch.wall_clock() <= system_ms() - 7000
    call = node._produce.build(1, "q", [OutgoingMessage(body=b"x")])
    cmd = decode_command(call.command)
    assert isinstance(cmd, Produce)
    assert before - 7000 <= cmd.now_ms <= system_ms() - 7000
