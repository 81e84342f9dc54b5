"""The ``Cmq-Leader`` header (docs/api.md, "Leader hint"): on successful answers of routes that
name a queue, when the hint function names another node; nowhere else."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from api.app import make_app
from cmq.errors import QueueNotFound
from tests.api.recording import RecordingService


def hint(name: str) -> str:
    return "" if name == "here" else f"10.0.0.2:80{len(name)}"


async def test_queue_answers_name_the_leader_and_others_do_not() -> None:
    service = RecordingService()
    asked: list[str] = []

    def recorded(name: str) -> str:
        asked.append(name)
        return hint(name)

    app = make_app(service, leader_hint=recorded)
    async with TestClient(TestServer(app)) as c:
        sent = await c.post("/v1/queues/orders/messages", json={"messages": [{"body": "x"}]})
        assert sent.status == 200 and sent.headers["Cmq-Leader"] == "10.0.0.2:806"
        got = await c.get("/v1/queues/orders")
        assert got.status == 200 and got.headers["Cmq-Leader"] == "10.0.0.2:806"
        led_here = await c.get("/v1/queues/here")  # this node leads: no header
        assert led_here.status == 200 and "Cmq-Leader" not in led_here.headers
        listed = await c.get("/v1/queues")  # names no queue
        assert listed.status == 200 and "Cmq-Leader" not in listed.headers
        service.fail["get_queue"] = QueueNotFound("no queue 'gone'")
        missing = await c.get("/v1/queues/gone")  # an error answer carries none
        assert missing.status == 404 and "Cmq-Leader" not in missing.headers
        bad = await c.post("/v1/queues/orders/messages", data=b"{")  # refused before the call
        assert bad.status == 400 and "Cmq-Leader" not in bad.headers
    assert asked == ["orders", "orders", "here"]


async def test_no_hint_function_no_header() -> None:
    async with TestClient(TestServer(make_app(RecordingService()))) as c:
        sent = await c.post("/v1/queues/orders/messages", json={"messages": [{"body": "x"}]})
        assert sent.status == 200 and "Cmq-Leader" not in sent.headers
