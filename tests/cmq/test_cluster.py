"""End-to-end: three `cmq serve` processes on loopback, driven through the HTTP API."""

from __future__ import annotations

import asyncio
import base64
import itertools
import random
import time
import urllib.request

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cmq.cluster import CmqCluster, request

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> CmqCluster:
    c = CmqCluster(tmp_path_factory.mktemp("cmq"), n=3, groups=2)
    c.start_all()
    yield c  # type: ignore[misc]
    c.stop_all()


def test_queue_lifecycle_through_any_node(cluster: CmqCluster) -> None:
    a, b, c = (cluster.http[i] for i in (1, 2, 3))
    assert request(a, "PUT", "/v1/queues/life", {"attributes": {"visibility_timeout": 5}})[0] == 201
    assert request(b, "PUT", "/v1/queues/life", {"attributes": {"visibility_timeout": 5}})[0] == 200
    status, err = request(c, "PUT", "/v1/queues/life", {"attributes": {"visibility_timeout": 6}})
    assert status == 409 and err["error"]["code"] == "QueueAlreadyExists"
    status, sent = request(
        b,
        "POST",
        "/v1/queues/life/messages",
        {"messages": [{"body": "one"}, {"body_base64": base64.b64encode(b"\x00\xff").decode()}]},
    )
    assert status == 200 and [m["seq"] for m in sent["messages"]] == [1, 2]
    status, got = request(c, "POST", "/v1/queues/life/messages/receive", {"max_messages": 10})
    assert status == 200
    assert [m.get("body") for m in got["messages"]] == ["one", None]
    assert base64.b64decode(got["messages"][1]["body_base64"]) == b"\x00\xff"
    receipts = [m["receipt"] for m in got["messages"]]
    # Nothing else is visible while the leases last.
    assert request(a, "POST", "/v1/queues/life/messages/receive", {})[1]["messages"] == []
    status, acked = request(a, "POST", "/v1/queues/life/messages/ack", {"receipts": receipts})
    assert status == 200 and [r["ok"] for r in acked["results"]] == [True, True]
    status, again = request(b, "POST", "/v1/queues/life/messages/ack", {"receipts": receipts[:1]})
    assert again["results"][0]["ok"] is False and again["results"][0]["error"]
    status, info = request(c, "GET", "/v1/queues/life")
    assert status == 200 and info["stats"]["acked_total"] == 2 and info["stats"]["visible"] == 0
    names = [q["name"] for q in request(a, "GET", "/v1/queues")[1]["queues"]]
    assert "life" in names
    assert request(b, "DELETE", "/v1/queues/life")[0] == 200
    assert request(c, "GET", "/v1/queues/life")[0] == 404


def test_receipts_are_bound_to_their_queue(cluster: CmqCluster) -> None:
    u = cluster.http[1]
    for q in ("rq1", "rq2"):
        request(u, "PUT", f"/v1/queues/{q}")
        request(u, "POST", f"/v1/queues/{q}/messages", {"messages": [{"body": q}]})
    got = request(u, "POST", "/v1/queues/rq1/messages/receive", {})[1]["messages"]
    receipt = got[0]["receipt"]
    status, res = request(u, "POST", "/v1/queues/rq2/messages/ack", {"receipts": [receipt]})
    assert status == 200 and res["results"][0] == {
        "receipt": receipt,
        "ok": False,
        "error": "ReceiptHandleIsInvalid",
    }
    tampered = receipt[:-2] + ("AA" if not receipt.endswith("AA") else "BB")
    res = request(u, "POST", "/v1/queues/rq1/messages/ack", {"receipts": [tampered, receipt]})[1]
    assert [r["ok"] for r in res["results"]] == [False, True]


def test_bad_input_changes_nothing(cluster: CmqCluster) -> None:
    u = cluster.http[2]
    request(u, "PUT", "/v1/queues/strict", {"attributes": {"max_message_size": 1024}})
    before = request(u, "GET", "/v1/queues/strict")[1]["stats"]
    cases = [
        ("PUT", "/v1/queues/bad%20name!", {}),
        ("PUT", "/v1/queues/" + "n" * 81, {}),
        ("PUT", "/v1/queues/x", {"attributes": {"visibility_timeout": -1}}),
        ("PUT", "/v1/queues/x", {"attributes": {"nonsense": 1}}),
        ("POST", "/v1/queues/strict/messages", {"messages": [{"body": "x" * 2000}]}),
        ("POST", "/v1/queues/strict/messages", {"messages": [{"body_base64": "***"}]}),
        ("POST", "/v1/queues/strict/messages", {"messages": []}),
        ("POST", "/v1/queues/strict/messages", {"messages": [{"body": "a", "extra": 1}]}),
        ("POST", "/v1/queues/strict/messages/receive", {"max_messages": 1000}),
        ("POST", "/v1/queues/strict/messages/receive", {"wait_seconds": "soon"}),
        ("POST", "/v1/queues/strict/messages/ack", {"receipts": "nope"}),
        ("PATCH", "/v1/queues/strict", {"attributes": {"delay_seconds": 5000}}),
        ("POST", "/v1/queues/missing/messages", {"messages": [{"body": "a"}]}),
    ]
    for method, path, body in cases:
        status, err = request(u, method, path, body)
        assert 400 <= status < 500, (method, path, status, err)
        assert isinstance(err, dict) and err["error"]["code"], (path, err)
    assert request(u, "GET", "/v1/queues/strict")[1]["stats"] == before
    assert "x" not in [q["name"] for q in request(u, "GET", "/v1/queues")[1]["queues"]]


async def test_kill_the_leader_under_load_loses_nothing(cluster: CmqCluster) -> None:
    u = cluster.http[1]
    request(u, "PUT", "/v1/queues/jepsen", {"attributes": {"visibility_timeout": 4}})
    attempted: set[str] = set()
    acked_sends: set[str] = set()
    received: list[str] = []
    acked_deliveries: set[str] = set()
    redelivered_after_ack: list[str] = []
    stop_producers = asyncio.Event()
    stop_consumers = asyncio.Event()
    rng = random.Random(1)

    def live_url() -> str:
        return cluster.http[rng.choice(sorted(cluster.procs))]

    async def producer(session: aiohttp.ClientSession, w: int) -> None:
        for n in itertools.count():
            if stop_producers.is_set():
                return
            bodies = [f"p{w}-{n}-{k}" for k in range(5)]
            attempted.update(bodies)
            try:
                async with session.post(
                    live_url() + "/v1/queues/jepsen/messages",
                    json={"messages": [{"body": b} for b in bodies]},
                    timeout=aiohttp.ClientTimeout(total=15),
                ) as r:
                    if r.status == 200:
                        acked_sends.update(bodies)
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.05)

    async def consumer(session: aiohttp.ClientSession) -> None:
        idle = 0
        while not (stop_consumers.is_set() and idle >= 3):
            try:
                async with session.post(
                    live_url() + "/v1/queues/jepsen/messages/receive",
                    json={"max_messages": 20, "wait_seconds": 1},
                    timeout=aiohttp.ClientTimeout(total=15),
                ) as r:
                    if r.status != 200:
                        await asyncio.sleep(0.05)
                        continue
                    msgs = (await r.json())["messages"]
                idle = idle + 1 if not msgs else 0
                if not msgs:
                    continue
                for m in msgs:
                    if m["body"] in acked_deliveries:
                        redelivered_after_ack.append(m["body"])
                    received.append(m["body"])
                async with session.post(
                    live_url() + "/v1/queues/jepsen/messages/ack",
                    json={"receipts": [m["receipt"] for m in msgs]},
                    timeout=aiohttp.ClientTimeout(total=15),
                ) as r:
                    if r.status == 200:
                        results = (await r.json())["results"]
                        for m, res in zip(msgs, results, strict=True):
                            if res["ok"]:
                                acked_deliveries.add(m["body"])
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.05)

    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(producer(session, w)) for w in range(3)]
        tasks += [asyncio.create_task(consumer(session)) for _ in range(3)]
        await asyncio.sleep(3)
        victim = cluster.leader_node_of_queue("jepsen")
        cluster.kill(victim)
        await asyncio.sleep(3)
        cluster.start(victim)
        await asyncio.sleep(3)
        stop_producers.set()
        await asyncio.gather(*tasks[:3])
        stop_consumers.set()
        await asyncio.wait_for(asyncio.gather(*tasks[3:]), 120)
    cluster.wait_ready()

    lost = acked_sends - set(received)
    unexpected = set(received) - attempted
    print(
        f"attempted={len(attempted)} acked_sends={len(acked_sends)} received={len(received)} "
        f"distinct={len(set(received))} lost={len(lost)} unexpected={len(unexpected)} "
        f"redelivered_after_ack={len(redelivered_after_ack)} victim={victim}"
    )
    assert len(acked_sends) > 100
    assert not lost
    assert not unexpected
    assert not redelivered_after_ack


def test_cluster_status(cluster: CmqCluster) -> None:
    status, st = request(cluster.http[3], "GET", "/v1/status")
    assert status == 200 and set(st["groups"]) == {"0", "1", "2"}
    assert all(g["leader"] in (1, 2, 3) for g in st["groups"].values())
    for _ in range(100):  # every node registers itself in the catalog when it starts
        st = request(cluster.http[1], "GET", "/v1/status")[1]
        if set(st["nodes"]) == {"1", "2", "3"}:
            break
        time.sleep(0.1)
    assert set(st["nodes"]) == {"1", "2", "3"}
    assert st["data_groups"]["1"]["replicas"] == [1, 2, 3]
    assert all(d.endswith("node2") for d in [st["data_groups"]["2"]["data_dirs"]["2"]])


def test_visibility_and_nack_through_the_cluster(cluster: CmqCluster) -> None:
    u = cluster.http[2]
    request(u, "PUT", "/v1/queues/vis", {"attributes": {"visibility_timeout": 60}})
    request(u, "POST", "/v1/queues/vis/messages", {"messages": [{"body": "a"}, {"body": "b"}]})
    got = request(u, "POST", "/v1/queues/vis/messages/receive", {"max_messages": 2})[1]
    ra, rb = (m["receipt"] for m in got["messages"])
    entries = [
        {"receipt": ra, "visibility_timeout": 0},
        {"receipt": "bogus", "visibility_timeout": 5},
        {"receipt": rb, "visibility_timeout": 120},
    ]
    status, res = request(u, "POST", "/v1/queues/vis/messages/visibility", {"entries": entries})
    assert status == 200
    assert [(r["ok"], r.get("error")) for r in res["results"]] == [
        (True, None),
        (False, "ReceiptHandleIsInvalid"),
        (True, None),
    ]
    again = request(u, "POST", "/v1/queues/vis/messages/receive", {"max_messages": 2})[1]
    assert [m["body"] for m in again["messages"]] == ["a"]  # visible at once; b still leased
    status, res = request(
        u, "POST", "/v1/queues/vis/messages/nack", {"receipts": [rb], "delay_seconds": 0}
    )
    assert status == 200 and res["results"][0]["ok"] is True
    last = request(u, "POST", "/v1/queues/vis/messages/receive", {"max_messages": 2})[1]
    assert [m["body"] for m in last["messages"]] == ["b"]


def _metric(text: str, name: str) -> float:
    """Sum of every sample of ``name`` (all label sets) in a Prometheus text exposition."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


def test_metrics_expose_the_wal_raft_and_process(cluster: CmqCluster) -> None:
    u = cluster.http[1]
    assert request(u, "PUT", "/v1/queues/metered")[0] in (200, 201)
    leader = cluster.leader_node_of_queue("metered")

    def scrape() -> str:
        with urllib.request.urlopen(cluster.http[leader] + "/metrics", timeout=10) as r:
            return str(r.read().decode())

    before = scrape()
    for _ in range(5):
        status, _ = request(u, "POST", "/v1/queues/metered/messages", {"messages": [{"body": "m"}]})
        assert status == 200
    after = scrape()
    for name in ("cmq_wal_records_total", "cmq_wal_fsyncs_total", "cmq_raft_proposals_total"):
        assert _metric(after, name) > _metric(before, name), name
    assert _metric(after, "cmq_wal_fsyncs_total") == _metric(after, "cmq_wal_fsync_seconds_count")
    assert _metric(after, "cmq_raft_is_leader") >= 1
    assert _metric(after, "process_resident_memory_bytes") > 10_000_000
    assert _metric(after, "process_cpu_seconds_total") > 0
    assert 'le="+Inf"' in after and 'le="inf"' not in after
