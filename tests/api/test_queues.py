"""Happy paths of the queue endpoints: what reaches the service and how results render."""

from __future__ import annotations

from cmq.model import QueueAttributes
from tests.api.conftest import Client
from tests.api.recording import CANNED_STATS, Call, RecordingService


async def test_create_with_defaults_returns_201_and_location(
    client: Client, service: RecordingService
) -> None:
    resp = await client.put("/v1/queues/orders")
    assert resp.status == 201
    assert resp.headers["Location"] == "/v1/queues/orders"
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body == {"name": "orders", "created": True, "attributes": QueueAttributes().to_dict()}
    assert service.calls == [Call("create_queue", ("orders", QueueAttributes()))]


async def test_create_with_attributes(client: Client, service: RecordingService) -> None:
    attrs = {"visibility_timeout": 60, "dead_letter_queue": "orders-dlq", "max_receive_count": 5}
    resp = await client.put("/v1/queues/orders", json={"attributes": attrs})
    assert resp.status == 201
    expected = QueueAttributes(
        visibility_timeout=60, dead_letter_queue="orders-dlq", max_receive_count=5
    )
    assert service.calls == [Call("create_queue", ("orders", expected))]
    assert (await resp.json())["attributes"] == expected.to_dict()


async def test_create_existing_identical_returns_200(
    client: Client, service: RecordingService
) -> None:
    service.created = False
    resp = await client.put("/v1/queues/orders", json={})
    assert resp.status == 200
    assert "Location" not in resp.headers
    assert (await resp.json())["created"] is False


async def test_create_null_attributes_means_defaults(
    client: Client, service: RecordingService
) -> None:
    resp = await client.put("/v1/queues/q", json={"attributes": None})
    assert resp.status == 201
    assert service.calls == [Call("create_queue", ("q", QueueAttributes()))]


async def test_list(client: Client, service: RecordingService) -> None:
    resp = await client.get("/v1/queues")
    assert resp.status == 200
    assert await resp.json() == {"queues": [{"name": "alpha"}, {"name": "beta"}]}
    assert service.methods() == ["list_queues"]


async def test_list_empty(client: Client, service: RecordingService) -> None:
    service.queues = []
    resp = await client.get("/v1/queues")
    assert await resp.json() == {"queues": []}


async def test_get_renders_attributes_and_stats(client: Client, service: RecordingService) -> None:
    service.attributes = QueueAttributes(delay_seconds=5)
    resp = await client.get("/v1/queues/orders")
    assert resp.status == 200
    assert await resp.json() == {
        "name": "orders",
        "attributes": {
            "visibility_timeout": 30,
            "delay_seconds": 5,
            "message_retention_seconds": 345_600,
            "max_message_size": 1_048_576,
            "receive_wait_seconds": 0,
            "dead_letter_queue": None,
            "max_receive_count": 0,
            "archive": False,
            "fifo": False,
            "content_based_deduplication": False,
            "max_delay_seconds": 900,
            "retry": None,
            "priorities": 1,
            "retain_acked_seconds": 0,
        },
        "stats": {
            "visible": CANNED_STATS.visible,
            "in_flight": CANNED_STATS.in_flight,
            "delayed": CANNED_STATS.delayed,
            "sent_total": CANNED_STATS.sent_total,
            "acked_total": CANNED_STATS.acked_total,
            "dead_lettered_total": 0,
            "expired_total": 0,
            "oldest_age_ms": CANNED_STATS.oldest_age_ms,
            "segments": {"active": 1, "sealed": 2, "released": 3, "archived_pending": 4},
            "disk_bytes": 12345,
            "oldest_unarchived_ms": 60_000,
            "visible_by_priority": [],
            "tenants": 0,
        },
    }
    assert service.calls == [Call("get_queue", ("orders",))]


async def test_patch_passes_only_the_changes(client: Client, service: RecordingService) -> None:
    resp = await client.patch("/v1/queues/orders", json={"attributes": {"delay_seconds": 10}})
    assert resp.status == 200
    assert service.calls == [Call("set_attributes", ("orders", {"delay_seconds": 10}))]
    body = await resp.json()
    assert body["name"] == "orders"
    assert body["attributes"]["delay_seconds"] == 10


async def test_patch_max_receive_count_alone_is_left_to_the_service(
    client: Client, service: RecordingService
) -> None:
    # The queue may already have a DLQ: the cross-field rule is the service's to check.
    service.attributes = QueueAttributes(dead_letter_queue="dlq", max_receive_count=3)
    resp = await client.patch("/v1/queues/q", json={"attributes": {"max_receive_count": 9}})
    assert resp.status == 200
    assert service.calls == [Call("set_attributes", ("q", {"max_receive_count": 9}))]


async def test_delete(client: Client, service: RecordingService) -> None:
    resp = await client.delete("/v1/queues/orders")
    assert resp.status == 200
    assert await resp.json() == {"name": "orders", "deleted": True}
    assert service.calls == [Call("delete_queue", ("orders",))]


async def test_delete_accepts_an_empty_object(client: Client, service: RecordingService) -> None:
    resp = await client.delete("/v1/queues/orders", json={})
    assert resp.status == 200
    assert service.methods() == ["delete_queue"]


async def test_purge(client: Client, service: RecordingService) -> None:
    resp = await client.post("/v1/queues/orders/purge")
    assert resp.status == 200
    assert await resp.json() == {"purged": 7}
    assert service.calls == [Call("purge", ("orders",))]


async def test_names_at_the_edges_of_the_pattern(client: Client, service: RecordingService) -> None:
    for name in ("a", "A-z_0-9", "x" * 80):
        resp = await client.get(f"/v1/queues/{name}")
        assert resp.status == 200, name
    assert [c.args[0] for c in service.calls] == ["a", "A-z_0-9", "x" * 80]
