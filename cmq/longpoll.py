"""One long poll as successive shorter polls (`sliced`): a forwarded receive waits at the
queue's leader in slices of `cmq.node.queue_service.FORWARDED_POLL_SECONDS`, and the SQS
ReceiveMessage long poll in slices of `api.sqs.message_ops.POLL_SLICE`. Pure asyncio; imports
nothing of cmq (one of the contract modules at cmq's top level, so both may use it)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["sliced"]

T = TypeVar("T")


async def sliced(
    poll: Callable[[int], Awaitable[list[T]]],
    wait: int,
    slice_seconds: int,
    *,
    clock: Callable[[], float] | None = None,
) -> list[T]:
    """A long poll of ``wait`` seconds as polls of at most ``slice_seconds`` each.

    Runs ``poll(s)`` with ``s = min(slice_seconds, the remaining wait rounded up to whole
    seconds)`` until a poll answers something non-empty or the wait is over, and returns that
    last answer (``[]`` when the wait ended with nothing). A ``wait`` of 0 (or less) polls once,
    with 0. The wait is over when ``clock`` (seconds; the running loop's ``time()`` when None)
    has advanced by ``wait`` since the call, or when the slices given add up to ``wait``: a poll
    counts as lasting at least its slice, so one that answers early with nothing never makes
    the poll spin (there are at most ``ceil(wait / slice_seconds)`` polls), and one that runs
    over its slice shortens what is left. An exception of ``poll`` propagates at once, with no
    further poll; cancelling the call cancels the poll in progress. ``slice_seconds`` >= 1."""
    if slice_seconds < 1:
        raise ValueError(f"slice_seconds must be at least 1, not {slice_seconds}")
    now = asyncio.get_running_loop().time if clock is None else clock
    start = now()
    given = 0

    def elapsed() -> float:
        return max(now() - start, given)

    while True:
        s = min(slice_seconds, max(0, math.ceil(wait - elapsed())))
        got = await poll(s)
        given += s
        if got or s == 0 or elapsed() >= wait:
            return got
