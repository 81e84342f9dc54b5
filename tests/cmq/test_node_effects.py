"""A one-node cluster in process: long polls wake from the machines' apply effects, and the
leader's housekeeping proposes what the machine says is due (dead-letter moves, expiry)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cmq.catalog.meta import CatalogMachine
from cmq.model import OutgoingMessage, QueueAttributes
from tests.cmq.helpers import one_node


async def test_a_send_wakes_a_long_poll(tmp_path: Path) -> None:
    async with one_node(tmp_path, housekeeping_interval=60) as node:
        await node.create_queue("poll", QueueAttributes())
        started = time.monotonic()
        waiting = asyncio.ensure_future(node.receive("poll", 1, None, 15))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await node.send("poll", [OutgoingMessage(body=b"wake")])
        got = await asyncio.wait_for(waiting, 5)
        assert [m.body for m in got] == [b"wake"]
        assert time.monotonic() - started < 5  # woken by the send, not by the 15 s timeout


async def test_housekeeping_moves_dead_letters_and_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with one_node(tmp_path, housekeeping_interval=0.05) as node:
        await node.create_queue("dlq", QueueAttributes())
        attrs = QueueAttributes(
            visibility_timeout=0,
            dead_letter_queue="dlq",
            max_receive_count=1,
            message_retention_seconds=60,
        )
        await node.create_queue("work", attrs)
        await node.send("work", [OutgoingMessage(body=b"poison")])
        first = await node.receive("work", 1, None, 0)
        assert [m.receive_count for m in first] == [1]
        assert await node.receive("work", 1, None, 0) == []  # marked for the dead-letter queue
        moved = await node.receive("dlq", 1, None, 5)
        assert [m.body for m in moved] == [b"poison"]

        async def dead_lettered() -> bool:
            _, stats = await node.get_queue("work")
            return stats.dead_lettered_total == 1 and stats.in_flight == 0

        for _ in range(200):
            if await dead_lettered():
                break
            await asyncio.sleep(0.02)
        assert await dead_lettered()

        # Retention: the leader's clock jumps past it and the housekeeper proposes the due
        # Expire (stamped by the same clock as every command of the leader).
        await node.send("work", [OutgoingMessage(body=b"old")])
        real = node.ops.clock_stamp

        def later() -> int | None:
            now = real()
            return None if now is None else now + 61_000

        monkeypatch.setattr(node.ops, "clock_stamp", later)
        for _ in range(200):
            _, stats = await node.get_queue("work")
            if stats.expired_total:
                break
            await asyncio.sleep(0.02)
        assert stats.expired_total == 1 and stats.visible == 0


async def test_create_and_delete_return_once_this_nodes_catalog_shows_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a follower of the catalog group a committed change is applied a little after the
    # leader answered. Model that lag here: for 0.3 s after each change this node's catalog
    # still shows the state before it. The caller's next request must see the change.
    real_group_of, real_names = CatalogMachine.group_of, CatalogMachine.names
    stale: dict[str, int | None] = {}
    lag_until = 0.0

    def group_of(self: CatalogMachine, name: str) -> int | None:
        if time.monotonic() < lag_until and name in stale:
            return stale[name]
        return real_group_of(self, name)

    def names(self: CatalogMachine) -> list[str]:
        shown = {n for n in [*real_names(self), *stale] if group_of(self, n) is not None}
        return sorted(shown)

    monkeypatch.setattr(CatalogMachine, "group_of", group_of)
    monkeypatch.setattr(CatalogMachine, "names", names)
    async with one_node(tmp_path, housekeeping_interval=60) as node:
        stale["lagged"] = None
        lag_until = time.monotonic() + 0.3
        started = time.monotonic()
        await node.create_queue("lagged", QueueAttributes())
        assert "lagged" in await node.list_queues()
        await node.send("lagged", [OutgoingMessage(body=b"right after the create")])
        assert time.monotonic() - started >= 0.25  # it waited for this node's catalog

        stale["lagged"] = real_group_of(node.catalog, "lagged")
        lag_until = time.monotonic() + 0.3
        await node.delete_queue("lagged")
        assert "lagged" not in await node.list_queues()


async def test_housekeeping_retimes_a_queue_a_far_ahead_stamp_froze(tmp_path: Path) -> None:
    """A lease stamped two hours ahead gets in (proposed past the clock guard, as a cluster
    that met the clock bug before its fix would hold it): the leader's housekeeping proposes a
    `Retime`, and the leased message comes back after its visibility instead of in two hours."""
    from cmq.fsm.commands import Lease, Leased, encode_command

    async with one_node(tmp_path, housekeeping_interval=0.1) as node:
        await node.create_queue("frozen", QueueAttributes(visibility_timeout=1))
        await node.send("frozen", [OutgoingMessage(body=b"held")])
        group = node.router.group_of("frozen")
        ahead = Lease("frozen", node.ops.stamp() + 2 * 3_600_000, 1, 1_000)
        res = await node.ops.propose(group, encode_command(ahead))
        assert isinstance(res, Leased) and len(res.messages) == 1
        started = time.monotonic()
        got = await node.receive("frozen", 1, None, 10)
        assert [m.body for m in got] == [b"held"], "still frozen after 10 s"
        assert time.monotonic() - started < 5
        assert node.housekeeper.retimed == 1
