"""The ``/v1/nodes`` routes: decoding, the service call they make, errors and refusals."""

from __future__ import annotations

from cmq.errors import InvalidParameter, NodeBusy, NodeNotFound
from tests.api.conftest import Client
from tests.api.recording import RecordingService


async def test_list_join_drain_remove(client: Client, service: RecordingService) -> None:
    resp = await client.get("/v1/nodes")
    assert resp.status == 200
    (row,) = (await resp.json())["nodes"]
    assert row["id"] == 1 and row["state"] == "active" and row["leaders"] == [0, 1]
    body = {"id": 4, "address": "10.0.0.4:9080", "data_dirs": ["/d"], "zone": "b"}
    resp = await client.post("/v1/nodes", json=body)
    assert resp.status == 200
    assert (await resp.json()) == {"peers": {"1": "10.0.0.1:9080", "4": "10.0.0.4:9080"}}
    assert (await client.post("/v1/nodes/4/drain")).status == 200
    resp = await client.delete("/v1/nodes/4")
    assert (await resp.json()) == {"node": 4, "state": "removed"}
    assert service.methods() == ["list_nodes", "join_node", "drain_node", "remove_node"]
    assert service.calls[1].args == (4, "10.0.0.4:9080", "", ("/d",), "b")


async def test_bad_node_requests_change_nothing(client: Client, service: RecordingService) -> None:
    for method, path, body in [
        ("POST", "/v1/nodes/abc/drain", None),
        ("POST", "/v1/nodes/0/drain", None),
        ("DELETE", "/v1/nodes/-3", None),
        ("POST", "/v1/nodes", {"id": 0, "address": "h:1", "data_dirs": ["/d"]}),
        ("POST", "/v1/nodes", {"id": 4, "address": "h:1", "data_dirs": []}),
        ("POST", "/v1/nodes", {"id": 4, "address": "h:1"}),
        ("POST", "/v1/nodes", {"id": 4, "address": "h:1", "data_dirs": ["/d"], "x": 1}),
    ]:
        resp = await client.request(method, path, json=body)
        assert resp.status == 400, (method, path, body, resp.status)
        assert (await resp.json())["error"]["code"] in ("InvalidParameter", "EmptyBatch")
    assert service.calls == []


async def test_node_refusals_keep_their_codes(client: Client, service: RecordingService) -> None:
    service.fail["remove_node"] = NodeBusy("node 2 still holds replicas of groups [1]")
    resp = await client.delete("/v1/nodes/2")
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "NodeBusy"
    service.fail["drain_node"] = NodeNotFound("node 9 is not registered")
    resp = await client.post("/v1/nodes/9/drain")
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "NodeNotFound"


async def test_set_groups_route(client: Client, service: RecordingService) -> None:
    resp = await client.put("/v1/cluster/groups", json={"groups": 9})
    assert resp.status == 200
    assert (await resp.json()) == {"groups": 9, "added": [7, 8, 9]}
    assert service.methods() == ["set_groups"] and service.calls[0].args == (9,)
    for body in [{"groups": 0}, {"groups": 10_001}, {"groups": "4"}, {}, {"groups": 4, "x": 1}]:
        resp = await client.put("/v1/cluster/groups", json=body)
        assert resp.status == 400, body
        assert (await resp.json())["error"]["code"] == "InvalidParameter"
    assert len(service.calls) == 1
    service.fail["set_groups"] = InvalidParameter("the cluster has 6 data groups; ...")
    resp = await client.put("/v1/cluster/groups", json={"groups": 3})
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "InvalidParameter"
