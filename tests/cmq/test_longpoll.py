"""`cmq.longpoll.sliced`: one long poll as successive shorter polls. A fake poll records the
wait it was given and advances a fake clock, so no test waits for real."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from cmq.longpoll import sliced


@dataclass
class FakePoll:
    """A poll on a fake clock: each call records its wait, advances the clock by that wait
    times ``pace`` (1: a poll lasts its whole wait, as at the leader) and answers the next of
    ``answers`` (then ``[]``), or raises it when it is an exception."""

    answers: Sequence[list[str] | Exception] = ()
    pace: float = 1.0
    now: float = 1000.0
    waits: list[int] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    async def __call__(self, seconds: int) -> list[str]:
        self.waits.append(seconds)
        self.now += seconds * self.pace
        i = len(self.waits) - 1
        answer = self.answers[i] if i < len(self.answers) else []
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_a_wait_of_0_polls_once_with_0() -> None:
    poll = FakePoll()
    assert await sliced(poll, 0, 5, clock=poll.clock) == []
    assert poll.waits == [0]


async def test_a_negative_wait_polls_once_with_0() -> None:
    poll = FakePoll()
    assert await sliced(poll, -3, 5, clock=poll.clock) == []
    assert poll.waits == [0]


@pytest.mark.parametrize(
    ("wait", "slice_seconds", "waits"),
    [
        (20, 5, [5, 5, 5, 5]),
        (7, 5, [5, 2]),  # the last slice is the remainder
        (3, 1, [1, 1, 1]),
        (1, 5, [1]),
        (5, 5, [5]),
        (11, 3, [3, 3, 3, 2]),
    ],
)
async def test_the_slices_sum_to_the_wait(wait: int, slice_seconds: int, waits: list[int]) -> None:
    poll = FakePoll()
    assert await sliced(poll, wait, slice_seconds, clock=poll.clock) == []
    assert poll.waits == waits
    assert sum(poll.waits) == wait
    assert poll.now == 1000.0 + wait


async def test_it_stops_at_the_first_non_empty_answer() -> None:
    poll = FakePoll(answers=[[], ["a", "b"], ["never asked for"]])
    assert await sliced(poll, 20, 5, clock=poll.clock) == ["a", "b"]
    assert poll.waits == [5, 5]


async def test_an_answer_in_the_first_poll_is_the_only_poll() -> None:
    poll = FakePoll(answers=[["a"]])
    assert await sliced(poll, 20, 5, clock=poll.clock) == ["a"]
    assert poll.waits == [5]


async def test_an_answer_in_the_last_slice_is_returned() -> None:
    poll = FakePoll(answers=[[], [], ["late"]])
    assert await sliced(poll, 12, 5, clock=poll.clock) == ["late"]
    assert poll.waits == [5, 5, 2]


async def test_an_exception_propagates_with_no_further_poll() -> None:
    poll = FakePoll(answers=[[], ValueError("gone")])
    with pytest.raises(ValueError, match="gone"):
        await sliced(poll, 20, 5, clock=poll.clock)
    assert poll.waits == [5, 5]


async def test_polls_that_run_over_shorten_what_is_left_rounded_up() -> None:
    """The remaining wait is measured on the clock and rounded up to whole seconds: polls of
    1 s that take 1.4 s each leave 5 - 4.2 = 0.8 s after three, polled as 1 s, and the wait is
    over after four (5.6 s), not five."""
    poll = FakePoll(pace=1.4)
    assert await sliced(poll, 5, 1, clock=poll.clock) == []
    assert poll.waits == [1, 1, 1, 1]


async def test_the_last_slice_is_rounded_up_from_the_clock() -> None:
    poll = FakePoll(pace=1.1)  # 5 s slices that take 5.5 s: 20 - 16.5 = 3.5 left, polled as 4
    assert await sliced(poll, 20, 5, clock=poll.clock) == []
    assert poll.waits == [5, 5, 5, 4]


async def test_polls_that_answer_early_never_make_it_spin() -> None:
    """A poll that answers nothing at once still counts as its whole slice: no more than
    ceil(wait / slice) polls, the slices summing to the wait (the SQS surface's countdown)."""
    poll = FakePoll(pace=0.0)
    assert await sliced(poll, 20, 5, clock=poll.clock) == []
    assert poll.waits == [5, 5, 5, 5]


async def test_on_the_loops_clock_an_empty_wait_takes_no_time() -> None:
    """With the default clock (the running loop's): polls that answer at once end the call at
    once, after ceil(wait / slice) of them."""
    waits: list[int] = []

    async def poll(seconds: int) -> list[int]:
        waits.append(seconds)
        return []

    t0 = time.monotonic()
    assert await sliced(poll, 20, 5) == []
    assert waits == [5, 5, 5, 5]
    assert time.monotonic() - t0 < 1.0


async def test_on_the_loops_clock_a_poll_that_waits_counts_its_time() -> None:
    waits: list[int] = []

    async def poll(seconds: int) -> list[int]:
        waits.append(seconds)
        await asyncio.sleep(0.05)
        return [len(waits)] if len(waits) == 2 else []

    assert await sliced(poll, 3, 1) == [2]
    assert waits == [1, 1]


async def test_cancelling_cancels_the_poll_in_progress() -> None:
    started = asyncio.Event()
    cancelled = False

    async def poll(seconds: int) -> list[int]:
        nonlocal cancelled
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled = True
            raise
        return []

    task = asyncio.ensure_future(sliced(poll, 20, 5))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled


async def test_a_slice_below_1_is_refused() -> None:
    poll = FakePoll()
    with pytest.raises(ValueError, match="slice_seconds"):
        await sliced(poll, 5, 0, clock=poll.clock)
    assert poll.waits == []
