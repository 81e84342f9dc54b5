"""The streaming protocol on a node that asks for signatures: the WebSocket upgrade is verified
like any request, and every frame is checked against the key's grants (a refused frame gets
``AccessDenied`` and changes nothing; a revoked grant takes effect on the open connection)."""

from __future__ import annotations

import asyncio

import pytest

from cmq.client import AccessKey, Client, SyncClient
from cmq.client.stream import StreamClient
from cmq.errors import CmqError
from tests.auth.conftest import new_key
from tests.cmq.cluster import CmqCluster, unique_queue


def _stats(admin: SyncClient, queue: str) -> tuple[int, int]:
    s = admin.get_queue(queue).stats
    return s.visible, s.in_flight


def test_stream_upgrade_and_frames_are_authorized(
    auth_cluster: CmqCluster, admin: SyncClient, admin_key: AccessKey
) -> None:
    queue = unique_queue("stream-auth")
    other = unique_queue("stream-other")
    admin.create_queue(queue)
    admin.create_queue(other)
    producer = new_key(admin, (queue, ["send"]))
    url = auth_cluster.urls[0]

    async def run() -> None:
        # Unsigned: the upgrade itself is refused (401), nothing opened.
        async with StreamClient(url, access_key=None) as anonymous:
            anonymous.access_key = None
            with pytest.raises(CmqError) as refused:
                await anonymous.send(queue, ["x"])
            assert getattr(refused.value, "status", None) == 401
        # A wrong secret: refused the same way.
        forged = AccessKey(producer.access_key_id, "not-the-secret")
        async with StreamClient(url, access_key=forged) as s:
            with pytest.raises(CmqError) as refused:
                await s.send(queue, ["x"])
            assert getattr(refused.value, "status", None) == 401
        async with StreamClient(url, access_key=producer) as s:
            assert len(await s.send(queue, ["granted"])) == 1
            with pytest.raises(CmqError) as denied:
                await s.send(other, ["not granted"])
            assert denied.value.code == "AccessDenied"
            assert getattr(denied.value, "status", None) == 403
            sub = await s.subscribe(queue, prefetch=5)  # receive is not granted
            with pytest.raises(CmqError) as denied:
                await asyncio.wait_for(sub.next(), 10)
            assert denied.value.code == "AccessDenied"
            # Revoking the send grant takes effect on the open connection.
            async with Client(url, access_key=admin_key) as c:
                raw = await c.request(
                    "POST", f"/v1/keys/{producer.access_key_id}/revoke", {"pattern": queue}
                )
            assert raw.status == 200, raw.payload
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                try:
                    await s.send(queue, ["after revoke?"])
                except CmqError as e:
                    assert e.code == "AccessDenied"
                    break
                assert asyncio.get_running_loop().time() < deadline, "revoke never applied"
                await asyncio.sleep(0.2)

    asyncio.run(run())
    visible, in_flight = _stats(admin, queue)
    # "granted" plus any send that landed before the revocation reached this node; nothing
    # leased (the subscription was refused), nothing in the other queue.
    assert visible >= 1 and in_flight == 0
    assert _stats(admin, other) == (0, 0)
