"""A long poll forwarded to the group's leader waits as long as it asked, however short the
request deadline: it ends in the leader's answer, never in an unknown outcome while the leader
still polls (and would lease messages for a caller that has gone: the chaos runner's stream
consumers saw messages leased again and again by such abandoned polls)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.queue_node import FORWARDED_POLL_SECONDS
from cmq.routing.rpc import ReceiveCall
from tests.cmq.helpers import Twins, configs, queue_with_follower, running


async def test_a_forwarded_long_poll_outlasts_the_request_deadline(tmp_path: Path) -> None:
    cfgs = {
        nid: dataclasses.replace(cfg, request_timeout=1.0) for nid, cfg in configs(tmp_path).items()
    }
    async with running(cfgs, Twins((1, 2, 3))) as nodes:
        attrs = QueueAttributes(visibility_timeout=30)
        _, leader, follower = await queue_with_follower(nodes, "poll", attrs)

        t0 = time.monotonic()
        empty = await follower.receive("poll", 1, None, 3)
        assert empty == [] and time.monotonic() - t0 >= 2.5  # the whole wait, not 1 s

        async def send_later() -> None:
            await asyncio.sleep(2.0)
            await nodes[leader].send("poll", [OutgoingMessage(body=b"late")])

        sender = asyncio.ensure_future(send_later())
        got = await follower.receive("poll", 1, None, 5)
        await sender
        assert [m.body for m in got] == [b"late"]
        _, stats = await nodes[leader].get_queue("poll")
        assert stats.in_flight == 1  # leased once, by the poll that answered


async def test_a_cancelled_forwarded_long_poll_ends_at_the_leader_within_a_chunk(
    tmp_path: Path,
) -> None:
    """A caller that goes away mid-poll (a request cancelled, a stream subscription ended):
    the poll it left at the leader (a peer call cannot be cancelled) ends there within one
    chunk (`FORWARDED_POLL_SECONDS`), not after the caller's whole wait, so it cannot lease
    a message sent later for nobody."""
    async with running(configs(tmp_path), Twins((1, 2, 3))) as nodes:
        attrs = QueueAttributes(visibility_timeout=30)
        _, leader_id, follower = await queue_with_follower(nodes, "gone", attrs)
        leader = nodes[leader_id]
        served: list[tuple[float, float]] = []  # (start, end) of each receive the leader served
        answer = leader.router._answer

        async def observed(call: Any) -> Any:
            start = time.monotonic()
            try:
                return await answer(call)
            finally:
                if isinstance(call, ReceiveCall):
                    served.append((start, time.monotonic()))

        leader.router._answer = observed  # type: ignore[method-assign]
        poll = asyncio.ensure_future(follower.receive("gone", 1, None, 15))
        await asyncio.sleep(1.5)
        cancelled = time.monotonic()
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)
        await asyncio.sleep(FORWARDED_POLL_SECONDS + 1.0)
        assert served, "the poll never reached the leader"
        assert all(end <= cancelled + FORWARDED_POLL_SECONDS + 0.5 for _, end in served), served
        assert len(served) >= 2  # the wait went in chunks
