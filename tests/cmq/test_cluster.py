"""End-to-end: three `cmq serve` processes on loopback, driven through `cmq.client`. The
tests that only call the API share the session's cluster (`cmq_cluster`); the one that kills a
node starts its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cmq.client import Client, QueueAttributes, ServerError
from cmq.errors import QueueAlreadyExists, QueueNotFound
from tests.cmq.cluster import CmqCluster, Load, assert_safe, unique_queue

pytestmark = pytest.mark.slow


def _node(client: Client, cluster: CmqCluster, nid: int) -> Client:
    return client.derive([cluster.http[nid]])


async def test_queue_lifecycle_through_any_node(cmq_cluster: CmqCluster) -> None:
    q = unique_queue("life")
    async with Client(cmq_cluster.urls) as client:
        a, b, c = (_node(client, cmq_cluster, i) for i in (1, 2, 3))
        assert (await a.create_queue(q, {"visibility_timeout": 5})).created
        assert not (await b.create_queue(q, {"visibility_timeout": 5})).created
        with pytest.raises(QueueAlreadyExists) as exists:
            await c.create_queue(q, {"visibility_timeout": 6})
        assert isinstance(exists.value, ServerError) and exists.value.status == 409
        sent = await b.send(q, ["one", b"\x00\xff"])
        assert [m.seq for m in sent] == [1, 2]
        got = await c.receive(q, 10)
        assert [m.body for m in got] == ["one", b"\x00\xff"]
        receipts = [m.receipt for m in got]
        # Nothing else is visible while the leases last.
        assert await a.receive(q) == []
        assert [r.ok for r in await a.ack(q, receipts)] == [True, True]
        again = await b.ack(q, receipts[:1])
        assert again[0].ok is False and again[0].error
        info = await c.get_queue(q)
        assert info.stats.acked_total == 2 and info.stats.visible == 0
        assert info.attributes == QueueAttributes(visibility_timeout=5)
        assert q in await a.list_queues()
        await b.delete_queue(q)
        with pytest.raises(QueueNotFound):
            await c.get_queue(q)


async def test_receipts_are_bound_to_their_queue(cmq_cluster: CmqCluster) -> None:
    q1, q2 = unique_queue("rq1"), unique_queue("rq2")
    async with Client(cmq_cluster.urls[0]) as u:
        for q in (q1, q2):
            await u.create_queue(q)
            await u.send(q, [q])
        receipt = (await u.receive(q1))[0].receipt
        res = await u.ack(q2, [receipt])
        assert (res[0].receipt, res[0].ok, res[0].error) == (
            receipt,
            False,
            "ReceiptHandleIsInvalid",
        )
        tampered = receipt[:-2] + ("AA" if not receipt.endswith("AA") else "BB")
        assert [r.ok for r in await u.ack(q1, [tampered, receipt])] == [False, True]


async def test_bad_input_changes_nothing(cmq_cluster: CmqCluster) -> None:
    """Malformed requests, sent as they are (`Client.request`), are refused with a 4xx and a
    code; the queue's stats do not move."""
    strict = unique_queue("strict")
    missing = unique_queue("missing")
    async with Client(cmq_cluster.http[2]) as u:
        await u.create_queue(strict, {"max_message_size": 1024})
        before = (await u.get_queue(strict)).stats
        m = f"/v1/queues/{strict}/messages"
        cases = [
            ("PUT", "/v1/queues/bad%20name!", {}),
            ("PUT", "/v1/queues/" + "n" * 81, {}),
            ("PUT", "/v1/queues/x", {"attributes": {"visibility_timeout": -1}}),
            ("PUT", "/v1/queues/x", {"attributes": {"nonsense": 1}}),
            ("POST", m, {"messages": [{"body": "x" * 2000}]}),
            ("POST", m, {"messages": [{"body_base64": "***"}]}),
            ("POST", m, {"messages": []}),
            ("POST", m, {"messages": [{"body": "a", "extra": 1}]}),
            ("POST", f"{m}/receive", {"max_messages": 1000}),
            ("POST", f"{m}/receive", {"wait_seconds": "soon"}),
            ("POST", f"{m}/ack", {"receipts": "nope"}),
            ("PATCH", f"/v1/queues/{strict}", {"attributes": {"delay_seconds": 5000}}),
            ("POST", f"/v1/queues/{missing}/messages", {"messages": [{"body": "a"}]}),
        ]
        for method, path, body in cases:
            raw = await u.request(method, path, body)
            assert 400 <= raw.status < 500, (method, path, raw)
            assert isinstance(raw.payload, dict) and raw.payload["error"]["code"], (path, raw)
        assert (await u.get_queue(strict)).stats == before
        assert "x" not in await u.list_queues()


def test_cluster_status(cmq_cluster: CmqCluster) -> None:
    from cmq.client import SyncClient

    with SyncClient(cmq_cluster.http[3]) as c3, SyncClient(cmq_cluster.http[1]) as c1:
        st = c3.status()
        assert set(st["groups"]) == {"0", "1", "2"}
        assert all(g["leader"] in (1, 2, 3) for g in st["groups"].values())
        for _ in range(100):  # every node registers itself in the catalog when it starts
            st = c1.status()
            if set(st["nodes"]) == {"1", "2", "3"}:
                break
            time.sleep(0.1)
    assert set(st["nodes"]) == {"1", "2", "3"}
    assert st["data_groups"]["1"]["replicas"] == [1, 2, 3]
    assert all(d.endswith("node2") for d in [st["data_groups"]["2"]["data_dirs"]["2"]])


async def test_visibility_and_nack_through_the_cluster(cmq_cluster: CmqCluster) -> None:
    q = unique_queue("vis")
    async with Client(cmq_cluster.http[2]) as u:
        await u.create_queue(q, {"visibility_timeout": 60})
        await u.send(q, ["a", "b"])
        ra, rb = (m.receipt for m in await u.receive(q, 2))
        res = await u.change_visibility(q, [(ra, 0), ("bogus", 5), (rb, 120)])
        assert [(r.ok, r.error) for r in res] == [
            (True, None),
            (False, "ReceiptHandleIsInvalid"),
            (True, None),
        ]
        again = await u.receive(q, 2)
        assert [m.body for m in again] == ["a"]  # visible at once; b still leased
        assert (await u.nack(q, [rb], delay_seconds=0))[0].ok is True
        last = await u.receive(q, 2)
        assert [m.body for m in last] == ["b"]


def _metric(text: str, name: str) -> float:
    """Sum of every sample of ``name`` (all label sets) in a Prometheus text exposition."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


async def test_metrics_expose_the_wal_raft_and_process(cmq_cluster: CmqCluster) -> None:
    q = unique_queue("metered")
    async with Client(cmq_cluster.urls[0]) as u:
        assert (await u.create_queue(q)).created
        leader = _node(u, cmq_cluster, await cmq_cluster.leader_of_queue(q))
        before = await leader.metrics()
        for _ in range(5):
            await u.send(q, ["m"])
        after = await leader.metrics()
    for name in ("cmq_wal_records_total", "cmq_wal_fsyncs_total", "cmq_raft_proposals_total"):
        assert _metric(after, name) > _metric(before, name), name
    assert _metric(after, "cmq_wal_fsyncs_total") == _metric(after, "cmq_wal_fsync_seconds_count")
    assert _metric(after, "cmq_raft_is_leader") >= 1
    assert _metric(after, "process_resident_memory_bytes") > 10_000_000
    assert _metric(after, "process_cpu_seconds_total") > 0
    assert 'le="+Inf"' in after and 'le="inf"' not in after


# -- a cluster of its own: nodes are killed ------------------------------------------------------
@pytest.fixture
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CmqCluster]:
    with CmqCluster(tmp_path_factory.mktemp("cmq"), n=3, groups=2).running() as c:
        yield c


async def test_kill_the_leader_under_load_loses_nothing(own_cluster: CmqCluster) -> None:
    cluster = own_cluster
    async with Client(cluster.urls) as client:
        await client.create_queue("jepsen", {"visibility_timeout": 4})
    load = Load(cluster, "jepsen")
    await load.start()
    await asyncio.sleep(3)
    victim = await cluster.kill_and_restart_leader("jepsen", down=3, settle=3)
    out = await load.drain(timeout=120)
    await asyncio.to_thread(cluster.wait_ready)
    assert_safe(out, f"leader {victim} killed", confirmed_at_least=100)
