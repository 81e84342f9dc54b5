"""Admission of sends: at most `max_inflight_sends` per node; more wait (then `Overloaded`),
while receives and acks never wait for a send slot."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cmq.errors import Overloaded
from cmq.model import OutgoingMessage, QueueAttributes
from cmq.routing.rpc import Call, ProduceCall
from tests.cmq.helpers import Twins, configs, running


async def test_sends_beyond_the_slots_wait_and_consumers_do_not(tmp_path: Path) -> None:
    cfgs = {
        nid: replace(cfg, max_inflight_sends=1, request_timeout=1.0)
        for nid, cfg in configs(tmp_path).items()
    }
    async with running(cfgs, Twins((1, 2, 3))) as nodes:
        node = nodes[1]
        await node.create_queue("slots", QueueAttributes())
        await node.send("slots", [OutgoingMessage(body=b"first")])
        release = asyncio.Event()
        real_run = node.router.run_attempts

        async def held_run(
            group: int, attempt: Callable[[], Call[Any]], *, wait: float = 0.0
        ) -> Any:
            call = attempt()
            if isinstance(call, ProduceCall) and b"held" in call.command:
                await release.wait()
            return await real_run(group, attempt, wait=wait)

        node.router.run_attempts = held_run  # type: ignore[method-assign]
        held = asyncio.ensure_future(node.send("slots", [OutgoingMessage(body=b"held")]))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded):  # the one slot stays taken past the deadline
            await node.send("slots", [OutgoingMessage(body=b"late")])
        got = await node.receive("slots", 10, 30, 0)  # consumers pass while the slot is taken
        assert [m.body for m in got] == [b"first"]
        acked = await node.ack("slots", [m.receipt for m in got])
        assert [r.ok for r in acked] == [True]
        release.set()
        assert len(await held) == 1
        await node.send("slots", [OutgoingMessage(body=b"after")])  # the slot was given back
        _, stats = await node.get_queue("slots")
        assert stats.sent_total == 3
