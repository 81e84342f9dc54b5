"""A long poll forwarded to the group's leader waits as long as it asked, however short the
request deadline: it ends in the leader's answer, never in an unknown outcome while the leader
still polls (and would lease messages for a caller that has gone: the chaos runner's stream
consumers saw messages leased again and again by such abandoned polls)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from cmq.model import OutgoingMessage, QueueAttributes
from tests.cmq.helpers import Twins, configs, running, wait_until


async def test_a_forwarded_long_poll_outlasts_the_request_deadline(tmp_path: Path) -> None:
    cfgs = {
        nid: dataclasses.replace(cfg, request_timeout=1.0) for nid, cfg in configs(tmp_path).items()
    }
    async with running(cfgs, Twins((1, 2, 3))) as nodes:
        await nodes[1].create_queue("poll", QueueAttributes(visibility_timeout=30))
        group = nodes[1].catalog.group_of("poll")
        assert group is not None
        leader = nodes[1].raft.leader_of(group)
        follower = next(n for nid, n in nodes.items() if nid != leader)
        await wait_until(lambda: follower.catalog.group_of("poll") == group)

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
