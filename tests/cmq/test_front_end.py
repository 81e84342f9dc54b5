"""HTTP front-end processes (``cmq serve --http-workers N``, `cmq.frontend.proxy`):

* the proxy against a real one-node `QueueNode` through a real Unix socket: every
  `QueueService` coroutine is carried; results and errors (code, message) are the node's own;
  a cancelled long poll is cancelled in the node too (it leases nothing); a segment is read
  whole; a node process that goes away ends pending calls `OutcomeUnknown` and readiness;
* real processes: a 3-node cluster whose nodes each run 2 front ends serves the native API
  and the streaming protocol on the shared ports, and ``/metrics`` with the node's metrics;
  a killed front end is started again; a stopped node leaves no front end behind; a node that
  asks for signatures, over TLS, with a front end: signed requests, a key without the grant
  refused, a key deleted through the front end refused at once (`test_front_end_keys` covers
  the key ring's copy in process).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from cmq.admin.key_admin import ADMIN_KEY_FILE
from cmq.client import AccessKey, SyncClient
from cmq.client.stream import StreamClient
from cmq.errors import MessageTooLarge, OutcomeUnknown, QueueNotFound
from cmq.frontend import calls
from cmq.frontend.proxy import ServiceProxy, ServiceServer
from cmq.model import OutgoingMessage, QueueAttributes, SendRefused, SentMessage
from cmq.node.queue_node import QueueNode
from cmq.service import SERVICE_METHODS, QueueService
from tests.cmq.cluster import CmqCluster
from tests.cmq.helpers import one_node
from tests.tlsca import TestCA


@contextlib.asynccontextmanager
async def proxied(node: QueueNode, tmp: Path) -> AsyncIterator[tuple[ServiceServer, ServiceProxy]]:
    server = ServiceServer(node, str(tmp / "node.sock"))
    await server.start()
    proxy = ServiceProxy(server.path)
    try:
        await proxy.connect()
        yield server, proxy
    finally:
        await proxy.close()
        await server.close()


def test_every_service_method_is_carried() -> None:
    methods = {name: getattr(QueueService, name) for name in SERVICE_METHODS}
    coroutines = {name for name, f in methods.items() if inspect.iscoroutinefunction(f)}
    assert coroutines == set(calls.CALLS)
    assert set(methods) - coroutines == {"is_ready", "status"}  # both answered from calls.State
    for name in methods:  # the proxy defines each one itself (no generic fallback)
        assert getattr(ServiceProxy, name) is not getattr(QueueService, name), name
    for name, call in calls.CALLS.items():  # a call's fields are the method's parameters
        params = list(inspect.signature(methods[name]).parameters)[1:]
        assert list(call.__struct_fields__) == params, name


async def test_per_entry_sends_and_failures_cross_the_socket(tmp_path: Path) -> None:
    async with one_node(tmp_path / "n", 0.05) as node, proxied(node, tmp_path) as (_, p):
        await p.create_queue("small", QueueAttributes(max_message_size=1024))
        big, fits = OutgoingMessage(b"x" * 1025), OutgoingMessage(b"fits")
        got = await p.send_each("small", [big, fits])
        assert isinstance(got[0], SendRefused) and got[0].code == "MessageTooLarge"
        assert got[0] == (await node.send_each("small", [big]))[0]
        assert isinstance(got[1], SentMessage)
        with pytest.raises(MessageTooLarge):
            await p.send("small", [fits, big])


async def test_the_proxy_answers_as_the_node(tmp_path: Path) -> None:
    async with one_node(tmp_path / "n", 0.05) as node, proxied(node, tmp_path) as (server, p):
        assert os.stat(server.path).st_mode & 0o777 == 0o600
        assert p.is_ready() and p.status()["node"] == 1
        assert await p.create_queue("q", QueueAttributes(visibility_timeout=30)) is True
        assert await p.list_queues() == ["q"]
        sent = await p.send("q", [OutgoingMessage(b"one"), OutgoingMessage(b"two")])
        got = await p.receive("q", 10, 30, 0)
        assert [m.id for m in got] == [m.id for m in sent]
        assert [m.body for m in got] == [b"one", b"two"]
        results = await p.ack("q", [m.receipt for m in got] + ["not-a-receipt"])
        assert [r.ok for r in results] == [True, True, False]
        assert results[2].error == (await node.ack("q", ["not-a-receipt"]))[0].error
        attributes, stats = await p.get_queue("q")
        assert (attributes, stats.acked_total) == ((await node.get_queue("q"))[0], 2)

        with pytest.raises(QueueNotFound) as caught:
            await p.send("missing", [OutgoingMessage(b"x")])
        with pytest.raises(QueueNotFound) as direct:
            await node.send("missing", [OutgoingMessage(b"x")])
        assert (caught.value.code, caught.value.message) == (
            direct.value.code,
            direct.value.message,
        )


async def test_a_cancelled_long_poll_leases_nothing(tmp_path: Path) -> None:
    async with one_node(tmp_path / "n", 0.05) as node, proxied(node, tmp_path) as (_, p):
        await p.create_queue("q", QueueAttributes(visibility_timeout=30))
        poll = asyncio.create_task(p.receive("q", 1, 30, 20))
        await asyncio.sleep(0.5)
        poll.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poll
        await asyncio.sleep(0.3)  # the cancel frame reaches the node
        await node.send("q", [OutgoingMessage(b"after")])
        await asyncio.sleep(0.3)
        _, stats = await node.get_queue("q")
        assert (stats.visible, stats.in_flight) == (1, 0)
        [got] = await p.receive("q", 1, 30, 0)
        assert got.body == b"after"


async def test_a_released_segment_is_read_whole(tmp_path: Path) -> None:
    small = one_node(tmp_path / "n", 0.05, segment_max_bytes=512)
    async with small as node, proxied(node, tmp_path) as (_, p):
        await check_segment_read(node, p)


async def check_segment_read(node: QueueNode, p: ServiceProxy) -> None:
    """Fill a segment of an archive queue, ack everything: it is released; read it both ways."""
    attrs = replace(QueueAttributes(visibility_timeout=30), archive=True)
    await p.create_queue("arch", attrs)
    bodies: list[bytes] = []
    while all(s.state == "active" for s in (await p.list_segments("arch")).segments):
        batch = [b"r%03d" % (len(bodies) + i) + b"." * 100 for i in range(5)]
        await p.send("arch", [OutgoingMessage(b) for b in batch])
        bodies += batch
    while got := await p.receive("arch", 10, 30, 0):
        assert all(r.ok for r in await p.ack("arch", [m.receipt for m in got]))
    deadline = time.monotonic() + 20
    while not (listing := await p.list_segments("arch", "released")).segments:
        assert time.monotonic() < deadline, "no segment was released"
        await asyncio.sleep(0.1)
    segment = listing.segments[0]
    direct = await node.read_segment("arch", segment.first_seq)
    expected = [r async for batch in direct.batches for r in batch]
    stream = await p.read_segment("arch", segment.first_seq)
    assert stream.checksum == direct.checksum
    assert [r async for batch in stream.batches for r in batch] == expected
    assert expected and [r.body for r in expected] == bodies[: len(expected)]


async def test_a_node_that_goes_away_ends_calls_outcome_unknown(tmp_path: Path) -> None:
    async with one_node(tmp_path / "n", 0.05) as node:
        server = ServiceServer(node, str(tmp_path / "node.sock"))
        await server.start()
        proxy = ServiceProxy(server.path)
        await proxy.connect()
        try:
            await proxy.create_queue("q", QueueAttributes())
            poll = asyncio.create_task(proxy.receive("q", 1, 30, 20))
            await asyncio.sleep(0.3)
            await server.close()
            with pytest.raises(OutcomeUnknown):
                await poll
            assert proxy.lost is not None and not proxy.is_ready()
        finally:
            await proxy.close()


def front_end_pids(node_pid: int) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-P", str(node_pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(p) for p in out.split()]


@pytest.mark.slow
def test_a_cluster_served_by_front_ends(tmp_path: Path) -> None:
    cluster = CmqCluster(tmp_path, 3, groups=2)
    cluster.configure(http_workers=2)
    try:
        cluster.start_all()
        fronts = {nid: front_end_pids(p.pid) for nid, p in cluster.procs.items()}
        assert all(len(pids) == 2 for pids in fronts.values()), fronts
        client = SyncClient(cluster.urls)
        client.create_queue("fe")
        ids = [m.id for m in client.send("fe", [b"m%d" % i for i in range(20)])]
        seen: list[str] = []
        while len(seen) < 20:
            got = client.receive("fe", max_messages=10, wait_seconds=1)
            client.ack("fe", [m.receipt for m in got])
            seen += [m.id for m in got]
        assert sorted(seen) == sorted(ids)
        time.sleep(1.2)  # the front ends' copy of the node's metrics is at most a second old
        metrics = SyncClient([cluster.urls[0]]).metrics()
        assert "cmq_http_requests_total" in metrics  # the front end's own
        assert "cmq_wal_fsyncs_total" in metrics and "process_cpu_seconds_total" in metrics

        # the streaming protocol, through a front end
        async def stream_round() -> None:
            async with StreamClient(",".join(cluster.urls)) as s:
                [sent] = await s.send("fe", ["streamed"])
                sub = await s.subscribe("fe", prefetch=4)
                [got] = await sub.next()
                assert got.id == sent.id
                [done] = await sub.ack([got])
                assert done.ok

        asyncio.run(stream_round())

        # a killed front end is started again, and the port keeps serving
        os.kill(fronts[1][0], signal.SIGKILL)
        deadline = time.monotonic() + 20
        while len(set(front_end_pids(cluster.procs[1].pid)) - set(fronts[1])) < 1:
            assert time.monotonic() < deadline, "the front end was not started again"
            time.sleep(0.1)
        cluster.wait_ready()
        for _ in range(20):  # new connections land on every front end
            assert SyncClient([cluster.urls[0]]).list_queues() == ["fe"]

        node1 = cluster.procs[1]
        node1.send_signal(signal.SIGTERM)
        node1.wait(timeout=30)
        gone = fronts[1][1:] + list(set(front_end_pids(node1.pid)))
        for pid in gone:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            assert not _alive(pid), f"front end {pid} outlived its node"
    finally:
        cluster.stop_all()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


@pytest.mark.slow
def test_signed_front_ends_over_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = TestCA(tmp_path, "front-ends")
    cert, key = ca.issue("127.0.0.1")
    cluster = CmqCluster(tmp_path / "cluster", 1, groups=1, anonymous=False)
    cluster.configure(http_workers=1, tls_cert=str(cert), tls_key=str(key))
    monkeypatch.setenv("CMQ_CA_FILE", str(ca.ca_file))  # the harness's own readiness checks
    url = cluster.http[1]
    assert url.startswith("https://")
    try:
        cluster.start_all()
        assert len(front_end_pids(cluster.procs[1].pid)) == 1
        admin_file = cluster.root / "node1" / ADMIN_KEY_FILE
        deadline = time.monotonic() + 30
        while not admin_file.exists():
            assert time.monotonic() < deadline, "no bootstrap admin key"
            time.sleep(0.1)
        admin_key = AccessKey.from_file(admin_file)
        with SyncClient(url, access_key=admin_key, ca_file=str(ca.ca_file)) as admin:
            admin.create_queue("signed")
            raw = admin.request(
                "POST", "/v1/keys", {"grants": [{"pattern": "signed", "actions": ["send"]}]}
            )
            assert raw.status == 201, raw.payload
            sender = AccessKey(raw.payload["access_key_id"], raw.payload["secret_access_key"])
            with SyncClient(url, access_key=sender, ca_file=str(ca.ca_file)) as c:
                c.send("signed", [b"through a front end"])
                refused = c.request("POST", "/v1/queues/signed/messages/receive", {})
                assert refused.status == 403
                assert refused.payload["error"]["code"] == "AccessDenied"
                assert admin.request("DELETE", f"/v1/keys/{sender.access_key_id}").status == 200
                gone = c.request("GET", "/v1/queues/signed")
                assert gone.status == 401  # deleted through this front end: refused at once
                assert gone.payload["error"]["code"] == "InvalidClientTokenId"
            with SyncClient(url, ca_file=str(ca.ca_file)) as anon:
                assert anon.request("GET", "/v1/queues").status == 401
            stats = admin.get_queue("signed").stats
            assert (stats.visible, stats.sent_total) == (1, 1)
    finally:
        cluster.stop_all()
