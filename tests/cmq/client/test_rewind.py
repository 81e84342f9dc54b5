"""Rewind by time through the Python client, over HTTP with signatures, against a real
in-process one-node cluster (formed by this release: the ``rewind`` flag is on): it needs the
admin grant (403 otherwise, nothing changed), a bad ``since`` is refused with a code, and the
acknowledged messages sent since come back once with their receive counts restarted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from api.app import make_app
from api.auth.guard import AuthConfig
from cmq.client import AccessKey, Client
from cmq.errors import CmqError, InvalidParameter
from cmq.grants import KeyGrant
from cmq.node.queue_node import QueueNode
from tests.cmq.helpers import one_node

pytestmark = pytest.mark.asyncio

ADMIN = AccessKey("AKADMIN", "admin-secret")
WORKER = AccessKey("AKWORKER", "worker-secret")


@dataclass
class Keys:
    """The keys the app verifies against: an admin, and a worker that may send, receive and
    acknowledge on ``orders`` but not administer it."""

    grants: dict[str, tuple[KeyGrant, ...]] = field(
        default_factory=lambda: {
            ADMIN.access_key_id: (KeyGrant("*", ("admin", "send", "receive", "delete")),),
            WORKER.access_key_id: (KeyGrant("orders", ("send", "receive", "delete")),),
        }
    )

    def secret_of(self, key_id: str) -> str | None:
        return {k.access_key_id: k.secret_access_key for k in (ADMIN, WORKER)}.get(key_id)

    def grants_of(self, key_id: str) -> tuple[KeyGrant, ...] | None:
        return self.grants.get(key_id)


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    node: QueueNode
    async with one_node(tmp_path / "n1", housekeeping_interval=1.0, tick_interval=0.02) as node:
        server = TestServer(make_app(node, auth=AuthConfig(Keys(), region="us-east-1")))
        await server.start_server()
        try:
            yield str(server.make_url("")).rstrip("/")
        finally:
            await server.close()


async def test_rewind_needs_admin_and_brings_acked_messages_back_once(url: str) -> None:
    async with (
        Client(url, access_key=ADMIN) as admin,
        Client(url, access_key=WORKER) as worker,
    ):
        await admin.create_queue("orders", {"retain_acked_seconds": 3600})
        before = datetime.now(UTC) - timedelta(seconds=1)
        await worker.send("orders", ["a", "b", "c"])
        got = await worker.receive("orders", 10)
        assert sorted(m.body for m in got) == ["a", "b", "c"]
        await worker.ack("orders", [m.receipt for m in got])

        with pytest.raises(CmqError) as denied:
            await worker.rewind("orders", before)
        assert denied.value.code == "AccessDenied"
        assert getattr(denied.value, "status", None) == 403
        assert (await admin.get_queue("orders")).stats.visible == 0  # nothing changed

        with pytest.raises(InvalidParameter):
            await admin.rewind("orders", "yesterday")  # refused by the client
        raw = await admin.request("POST", "/v1/queues/orders/rewind", {"since": "2026-11-26"})
        assert raw.status == 400 and raw.payload["error"]["code"] == "InvalidParameter"

        assert await admin.rewind("orders", datetime.now(UTC) + timedelta(hours=1)) == 0
        assert await admin.rewind("orders", before.isoformat()) == 3
        assert await admin.rewind("orders", before) == 0  # their copies are live: not again
        again = await worker.receive("orders", 10)
        assert sorted(m.body for m in again) == ["a", "b", "c"]
        assert {m.id for m in again} == {m.id for m in got}
        assert [m.receive_count for m in again] == [1, 1, 1]
        await worker.ack("orders", [m.receipt for m in again])
        stats = (await admin.get_queue("orders")).stats
        assert stats.sent_total == 3 and stats.acked_total == 6 and stats.visible == 0


async def test_a_fifo_queue_refuses_a_rewind(url: str) -> None:
    async with Client(url, access_key=ADMIN) as admin:
        await admin.create_queue("jobs.fifo", {"fifo": True, "retain_acked_seconds": 60})
        with pytest.raises(InvalidParameter, match="FIFO"):
            await admin.rewind("jobs.fifo", "2026-11-26T10:00Z")
