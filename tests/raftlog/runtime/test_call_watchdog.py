"""`CallWatchdog`: a forwarded call is abandoned when ``abandon`` gives a reason, but never on a
check that ran late because this node's own event loop was stalled (the peer's frames may still
be unread in the socket)."""

from __future__ import annotations

import asyncio
import time

import pytest

from raftlog.errors import PeerUnavailable
from raftlog.runtime.peerwatch import CallWatchdog

EVERY = 0.05


async def test_a_reason_abandons_the_call() -> None:
    fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    dog = CallWatchdog(fut, 2, lambda: "node 2 silent for 9.9 s", EVERY)
    with pytest.raises(PeerUnavailable, match="abandoned: node 2 silent"):
        await asyncio.wait_for(fut, 2)
    dog.cancel()


async def test_no_reason_keeps_waiting() -> None:
    fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    asked = 0

    def never() -> str | None:
        nonlocal asked
        asked += 1
        return None

    dog = CallWatchdog(fut, 2, never, EVERY)
    await asyncio.sleep(EVERY * 6)
    assert not fut.done() and asked >= 3
    dog.cancel()


async def test_a_check_delayed_by_a_stalled_loop_does_not_judge() -> None:
    fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    checks: list[float] = []

    def silent() -> str | None:
        checks.append(time.monotonic())
        return "silent"

    dog = CallWatchdog(fut, 2, silent, EVERY)
    time.sleep(EVERY * 5)  # this node's loop is blocked past the first check's time
    stalled_until = time.monotonic()
    await asyncio.sleep(0)  # the late check runs now: it must not ask, let alone abandon
    await asyncio.sleep(0)
    assert not fut.done() and checks == []
    with pytest.raises(PeerUnavailable):
        await asyncio.wait_for(fut, 2)
    assert checks and checks[0] >= stalled_until + EVERY * 0.9  # judged one interval later
    dog.cancel()
