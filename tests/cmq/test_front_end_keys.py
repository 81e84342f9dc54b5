"""HTTP front ends that check signed requests themselves (`cmq.frontend.keys`,
`cmq.frontend.key_calls`), in process: a real one-node `QueueNode` behind a real Unix socket,
and two HTTP apps side by side, the node's own (what ``cmq serve`` runs without front ends) and
a front end's (the proxy and its copy of the key ring), so every answer is compared with the
node's:

* a signed request through the front end succeeds; a bad signature, an unknown key, a key
  without the grant get the node's status, code and message, and change nothing;
* the SQS surface (JSON protocol, signed by botocore): a send allowed, a receive refused 403
  ``AccessDenied`` in the protocol's shape, on both sides;
* the streaming protocol: a forged upgrade refused 401, a frame on a queue not granted 403, a
  grant revoked through the front end refused on the open stream at once;
* ``/v1/keys`` through the front end creates, grants, revokes and deletes on the node;
* a key deleted or a grant revoked on the node is refused by the front end within
  `BOUND_SECONDS`; a key created on the node is accepted within it;
* the catalog's key store changes its generation with every change and restore;
* the copy carries no sealed secret and not the cluster secret; an unchanged ring is not sent
  again; a request that finds the copy older than the bound waits for a new poll, and gets 503
  ``Unavailable`` when there is none (through HTTP too, changing nothing); a node serving
  anonymous
  requests answers the key calls ``Unavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import orjson
import pytest
from aiohttp.test_utils import TestServer
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from api.app import make_app
from api.auth.guard import AuthConfig
from api.sqs.queues import SqsSettings
from cmq.admin.key_admin import KeyAdmin, KeyRing
from cmq.catalog.keys import KeyStore, cluster_credential
from cmq.catalog.meta import CatalogMachine
from cmq.client import AccessKey, Client
from cmq.client.stream import StreamClient
from cmq.errors import CmqError, Unavailable
from cmq.frontend import key_calls
from cmq.frontend.key_calls import CopyKeys, KeyCopy, NodeKeys
from cmq.frontend.keys import BOUND_SECONDS, POLL_SECONDS, KeyCopyRing
from cmq.frontend.proxy import ServiceProxy, ServiceServer
from cmq.grants import KeyGrant
from cmq.node.queue_node import QueueNode
from tests.cmq.helpers import one_node

SECRET = b"node-effects-test-secret-0123456789"  # what `one_node` configures


@dataclass
class Sides:
    """The node's own app and a front end's app, and a client maker for each."""

    node: QueueNode
    direct: TestServer
    front: TestServer
    proxy: ServiceProxy
    admin: AccessKey

    def client(self, server: TestServer, key: AccessKey | None = None) -> Client:
        url = str(server.make_url("")).rstrip("/")
        return Client(url, access_key=key or self.admin, timeout=10)


@contextlib.asynccontextmanager
async def sides(tmp: Path) -> AsyncIterator[Sides]:
    async with one_node(tmp / "node", 0.05) as node:
        ring = KeyRing(node.catalog, SECRET)
        admin = KeyAdmin(node.catalog, node.router, SECRET, node.clock_source.wall_ms)
        server = ServiceServer(node, str(tmp / "node.sock"), keys=NodeKeys(ring, admin))
        await server.start()
        proxy = ServiceProxy(server.path, signed=True)
        direct = TestServer(make_app(node, sqs=SqsSettings(), auth=AuthConfig(ring), keys=admin))
        try:
            await proxy.connect()
            assert proxy.keys is not None
            front = TestServer(
                make_app(proxy, sqs=SqsSettings(), auth=front_auth(proxy), keys=proxy.keys)
            )
            await direct.start_server()
            await front.start_server()
            try:
                key_id, secret = cluster_credential(SECRET)
                yield Sides(node, direct, front, proxy, AccessKey(key_id, secret))
            finally:
                await front.close()
        finally:
            await direct.close()
            await proxy.close()
            await server.close()


def front_auth(proxy: ServiceProxy) -> AuthConfig:
    """What `cmq.cli.server.front_end` verifies requests with."""
    assert proxy.keys is not None
    return AuthConfig(proxy.keys, current=proxy.keys.current)


async def new_key(client: Client, *grants: tuple[str, list[str]]) -> AccessKey:
    raw = await client.request(
        "POST", "/v1/keys", {"grants": [{"pattern": p, "actions": a} for p, a in grants]}
    )
    assert raw.status == 201, raw.payload
    return AccessKey(raw.payload["access_key_id"], raw.payload["secret_access_key"])


async def answer(s: Sides, key: AccessKey, method: str, path: str, body: Any = None) -> Any:
    """(status, payload) of the same request on the front end and on the node: equal."""
    out = []
    for server in (s.front, s.direct):
        async with s.client(server, key) as c:
            raw = await c.request(method, path, body)
            out.append((raw.status, raw.payload))
    assert out[0] == out[1]
    return out[0]


async def test_signed_requests_through_a_front_end(tmp_path: Path) -> None:
    async with sides(tmp_path) as s, s.client(s.front) as admin:
        await admin.create_queue("orders-1")
        sender = await new_key(admin, ("orders-*", ["send"]))
        async with s.client(s.front, sender) as c:
            [sent] = await c.send("orders-1", [b"signed"])
        stats = (await s.node.get_queue("orders-1"))[1]
        assert stats.visible == 1
        # the key may not receive: 403 AccessDenied, the node's body, nothing leased
        status, body = await answer(s, sender, "POST", "/v1/queues/orders-1/messages/receive", {})
        assert status == 403 and body["error"]["code"] == "AccessDenied"
        assert "not granted receive on queue orders-1" in body["error"]["message"]
        # an unknown key, a wrong secret: 401 with the verifier's codes, as on the node
        unknown = AccessKey("AKCMQ" + "Z" * 16, sender.secret_access_key)
        status, body = await answer(s, unknown, "GET", "/v1/queues")
        assert (status, body["error"]["code"]) == (401, "InvalidClientTokenId")
        wrong = AccessKey(sender.access_key_id, "x" * 40)
        status, body = await answer(s, wrong, "POST", "/v1/queues/orders-1/messages", {})
        assert (status, body["error"]["code"]) == (401, "SignatureDoesNotMatch")
        # unsigned: refused too
        async with Client(str(s.front.make_url("")).rstrip("/"), timeout=10) as anon:
            raw = await anon.request("GET", "/v1/queues")
        assert raw.status == 401 and raw.payload["error"]["code"] == "MissingAuthenticationToken"
        after = (await s.node.get_queue("orders-1"))[1]  # the refusals changed nothing
        assert (after.visible, after.in_flight, after.sent_total) == (1, 0, stats.sent_total)
        # the whoami route answers the front end's copy of the grants
        async with s.client(s.front, sender) as c:
            raw = await c.request("GET", "/v1/whoami")
        assert raw.payload["access_key_id"] == sender.access_key_id
        assert raw.payload["grants"] == [{"pattern": "orders-*", "actions": ["send"]}]
        assert sent.id
        # a copy older than the bound is polled again before a request is checked; when the
        # node does not answer that poll: 503 Unavailable, nothing changed
        keys = s.proxy.keys
        assert keys is not None
        keys._clock = lambda: time.monotonic() + 2 * BOUND_SECONDS
        async with s.client(s.front, sender) as c:
            await c.send("orders-1", [b"after a new poll"])
            stats = (await s.node.get_queue("orders-1"))[1]

            async def quiet(call: Any) -> Any:
                raise Unavailable("the node went quiet")

            keys._clock = lambda: time.monotonic() + 4 * BOUND_SECONDS
            keys._call = quiet
            raw = await c.request("POST", "/v1/queues/orders-1/messages", {"messages": []})
        assert raw.status == 503 and raw.payload["error"]["code"] == "Unavailable"
        assert raw.payload["error"]["message"] == "the node went quiet"
        assert (await s.node.get_queue("orders-1"))[1].sent_total == stats.sent_total


async def test_keys_administered_through_a_front_end(tmp_path: Path) -> None:
    async with sides(tmp_path) as s, s.client(s.front) as admin:
        await admin.create_queue("jobs")
        key = await new_key(admin, ("jobs", ["send"]))
        assert key.access_key_id in s.node.catalog.keys.keys  # made on the node, through Raft
        listed = (await admin.request("GET", "/v1/keys")).payload["keys"]
        assert [k["access_key_id"] for k in listed] == [key.access_key_id]
        assert "sealed" not in str(listed) and key.secret_access_key not in str(listed)
        raw = await admin.request(
            "POST",
            f"/v1/keys/{key.access_key_id}/grants",
            {"pattern": "jobs", "actions": ["receive"]},
        )
        assert raw.status == 200 and raw.payload["grants"][0]["actions"] == ["receive", "send"]
        async with s.client(s.front, key) as c:  # the grant holds at once through this front end
            assert await c.receive("jobs", max_messages=1) == []
        raw = await admin.request(
            "POST", f"/v1/keys/{key.access_key_id}/revoke", {"pattern": "jobs"}
        )
        assert raw.status == 200 and raw.payload["grants"] == []
        status, body = await answer(s, key, "POST", "/v1/queues/jobs/messages/receive", {})
        assert (status, body["error"]["code"]) == (403, "AccessDenied")
        # a refused change: the node's code, nothing changed
        raw = await admin.request("POST", f"/v1/keys/{key.access_key_id}/revoke", {"pattern": "x"})
        assert raw.status == 400 and raw.payload["error"]["code"] == "InvalidParameter"
        raw = await admin.request("DELETE", f"/v1/keys/{key.access_key_id}")
        assert raw.payload == {"access_key_id": key.access_key_id, "deleted": True}
        assert s.node.catalog.keys.keys == {}
        status, body = await answer(s, key, "GET", "/v1/queues")
        assert (status, body["error"]["code"]) == (401, "InvalidClientTokenId")
        raw = await admin.request("DELETE", f"/v1/keys/{key.access_key_id}")
        assert raw.status == 404 and raw.payload["error"]["code"] == "AccessKeyNotFound"


async def _until_status(client: Client, path: str, status: int, started: float) -> float:
    """Seconds from ``started`` until ``client``'s GET ``path`` answers ``status``."""
    while True:
        raw = await client.request("GET", path)
        if raw.status == status:
            return time.monotonic() - started
        assert time.monotonic() - started < 5 * BOUND_SECONDS, (raw.status, raw.payload)
        await asyncio.sleep(0.02)


async def test_changes_on_the_node_reach_the_front_end_within_the_bound(tmp_path: Path) -> None:
    async with sides(tmp_path) as s, s.client(s.direct) as node_admin:
        await node_admin.create_queue("q")
        started = time.monotonic()
        key = await new_key(node_admin, ("q", ["receive"]))  # on the node, not the front end
        async with s.client(s.front, key) as c:
            took = await _until_status(c, "/v1/queues/q", 200, started)
            assert took <= BOUND_SECONDS
            raw = await node_admin.request(
                "POST", f"/v1/keys/{key.access_key_id}/revoke", {"pattern": "q"}
            )
            assert raw.status == 200
            took = await _until_status(c, "/v1/queues/q", 403, time.monotonic())
            assert took <= BOUND_SECONDS
            raw = await node_admin.request("DELETE", f"/v1/keys/{key.access_key_id}")
            assert raw.status == 200
            took = await _until_status(c, "/v1/queues/q", 401, time.monotonic())
            assert took <= BOUND_SECONDS


async def test_the_copy_holds_no_sealed_secret_nor_the_cluster_secret(tmp_path: Path) -> None:
    async with sides(tmp_path) as s, s.client(s.front) as admin:
        key = await new_key(admin, ("*", ["send"]))
        copy = await s.proxy.call(CopyKeys(-1))
        assert isinstance(copy, KeyCopy)
        assert [(k.id, k.secret) for k in copy.keys] == [(key.access_key_id, key.secret_access_key)]
        assert (copy.cluster.id, copy.cluster.secret) == cluster_credential(SECRET)
        sealed = s.node.catalog.keys.keys[key.access_key_id].sealed
        text = msgspec.msgpack.encode(copy)
        assert SECRET not in text and sealed.encode() not in text
        assert await s.proxy.call(CopyKeys(copy.generation)) is None  # unchanged: nothing sent


async def test_requests_wait_for_a_current_copy() -> None:
    now = [100.0]
    copy = KeyCopy(
        3,
        key_calls.KeyEntry("AKCMQCLUSTERAAAAAAAA", "c", (), 0),
        [key_calls.KeyEntry("AKCMQ" + "A" * 16, "s", (KeyGrant("q", ("send",)),), 1)],
    )
    asked: list[int] = []
    answer = asyncio.Event()
    answer.set()

    async def call(c: Any) -> Any:
        assert isinstance(c, CopyKeys)
        asked.append(c.known)
        await answer.wait()
        return None if c.known == copy.generation else copy

    ring = KeyCopyRing(call, clock=lambda: now[0], wait_seconds=0.3)
    with pytest.raises(Unavailable):  # never copied: nothing is served
        ring.secret_of("AKCMQ" + "A" * 16)
    await ring.refresh()
    assert ring.secret_of("AKCMQ" + "A" * 16) == "s"
    assert ring.grants_of("AKCMQCLUSTERAAAAAAAA") == (KeyGrant("*", ("admin",)),)
    assert ring.secret_of("AKCMQ" + "B" * 16) is None
    now[0] += BOUND_SECONDS  # exactly the bound: still current, no poll
    await asyncio.create_task(ring.current())  # (a task: its arrival stays in its context)
    assert asked == [-1]
    assert ring.grants_of("AKCMQ" + "A" * 16) == (KeyGrant("q", ("send",)),)

    async def check() -> str | None:  # one request's task: wait for a current copy, look up
        await ring.current()
        now[0] += 5  # however long the poll and the body took, the arrival is what counts
        return ring.secret_of("AKCMQ" + "A" * 16)

    now[0] += 0.01  # older than the bound: a look-up outside a request refuses ...
    with pytest.raises(Unavailable, match=r"copy of the access keys is 1\.0s old"):
        ring.secret_of("AKCMQ" + "A" * 16)
    assert await asyncio.create_task(check()) == "s"  # ... a request polls again first
    assert asked == [-1, 3]  # the generation held is sent back
    answer.clear()  # the node stops answering: the request waits, then 503
    now[0] += 2 * BOUND_SECONDS
    with pytest.raises(Unavailable, match="no current copy of the access keys"):
        await asyncio.create_task(check())
    answer.set()
    task = asyncio.create_task(ring.keep())
    await asyncio.sleep(POLL_SECONDS * 1.5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert ring.secret_of("AKCMQ" + "A" * 16) == "s"  # polled again by keep


async def test_an_anonymous_node_answers_key_calls_unavailable(tmp_path: Path) -> None:
    async with one_node(tmp_path / "node", 0.05) as node:
        server = ServiceServer(node, str(tmp_path / "node.sock"))
        await server.start()
        proxy = ServiceProxy(server.path, signed=True)
        try:
            with pytest.raises(Unavailable, match="anonymous"):
                await proxy.connect()
        finally:
            await proxy.close()
            await server.close()


async def test_the_sqs_surface_through_a_front_end(tmp_path: Path) -> None:
    async with sides(tmp_path) as s, s.client(s.front) as admin:
        await admin.create_queue("orders")
        sender = await new_key(admin, ("orders", ["send"]))

        async def sqs(server: TestServer, key: AccessKey, op: str) -> tuple[int, str]:
            url = str(server.make_url("/"))
            body = orjson.dumps({"QueueUrl": f"{url}000000000000/orders", "MessageBody": "hi"})
            request = AWSRequest(
                "POST",
                url,
                data=body,
                headers={
                    "X-Amz-Target": f"AmazonSQS.{op}",
                    "Content-Type": "application/x-amz-json-1.0",
                },
            )
            creds = Credentials(key.access_key_id, key.secret_access_key)
            SigV4Auth(creds, "sqs", "us-east-1").add_auth(request)
            async with aiohttp.ClientSession() as session:
                resp = await session.post(url, data=body, headers=dict(request.headers))
                got = await resp.json(content_type=None)
            return resp.status, got.get("__type", "")

        for server in (s.front, s.direct):
            assert await sqs(server, sender, "SendMessage") == (200, "")
            assert await sqs(server, sender, "ReceiveMessage") == (
                403,
                "com.amazonaws.sqs#AccessDenied",
            )
        assert (await s.node.get_queue("orders"))[1].visible == 2


async def test_the_streaming_protocol_through_a_front_end(tmp_path: Path) -> None:
    async with sides(tmp_path) as s, s.client(s.front) as admin:
        await admin.create_queue("s1")
        await admin.create_queue("s2")
        producer = await new_key(admin, ("s1", ["send"]))
        url = str(s.front.make_url("")).rstrip("/")
        forged = AccessKey(producer.access_key_id, "not-the-secret")
        async with StreamClient(url, access_key=forged) as bad:
            with pytest.raises(CmqError) as refused:
                await bad.send("s1", ["x"])
            assert getattr(refused.value, "status", None) == 401
        async with StreamClient(url, access_key=producer) as c:
            assert len(await c.send("s1", ["granted"])) == 1
            with pytest.raises(CmqError) as denied:
                await c.send("s2", ["not granted"])
            assert (denied.value.code, getattr(denied.value, "status", None)) == (
                "AccessDenied",
                403,
            )
            raw = await admin.request(
                "POST", f"/v1/keys/{producer.access_key_id}/revoke", {"pattern": "s1"}
            )
            assert raw.status == 200
            with pytest.raises(CmqError) as denied:  # revoked through this front end: at once
                await c.send("s1", ["after the revocation"])
            assert denied.value.code == "AccessDenied"
        assert (await s.node.get_queue("s1"))[1].visible == 1
        assert (await s.node.get_queue("s2"))[1].visible == 0


def test_the_key_stores_generation_moves_with_every_change() -> None:
    catalog = CatalogMachine()
    seen = {catalog.keys.generation}
    catalog.apply(1, KeyStore.create("AKCMQ" + "A" * 16, "sealed", [], 5))
    seen.add(catalog.keys.generation)
    catalog.apply(2, KeyStore.grant("AKCMQ" + "A" * 16, KeyGrant("q", ("send",))))
    seen.add(catalog.keys.generation)
    copy = CatalogMachine()
    seen.add(copy.keys.generation)  # another store of this process: never the same number
    copy.restore(3, catalog.snapshot())
    seen.add(copy.keys.generation)
    assert len(seen) == 5
    assert copy.keys.keys == catalog.keys.keys
