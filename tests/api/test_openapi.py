"""The OpenAPI document matches the application: same routes, valid OpenAPI 3.1, and the app's
real requests and responses conform to its schemas (jsonschema)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp import web

import api.openapi as api_openapi
from api.app import CONSOLE_PREFIX, make_app
from api.errors import HTTP_STATUS
from api.models import Health
from api.openapi import openapi_document
from api.routes import ROUTES, healthz
from api.routing import Response, Route
from cmq.errors import QueueAlreadyExists, QueueNotFound, Unavailable
from cmq.model import LIMITS, MAX_RECEIVE_BATCH, MAX_SEND_BATCH, QUEUE_NAME, ReceivedMessage
from cmq.stream import STREAM_PATH
from tests.api.bad_input_table import bad_input_cases
from tests.api.conftest import Client
from tests.api.recording import RecordingService

SPEC = openapi_document()
HTTP_METHODS = {"get", "put", "post", "patch", "delete", "head", "options", "trace"}


def app_routes(app: web.Application | None = None) -> set[tuple[str, str]]:
    app = make_app(RecordingService()) if app is None else app
    out = set()
    for route in app.router.routes():
        assert route.resource is not None
        if route.resource.canonical.startswith(CONSOLE_PREFIX):
            continue  # the web console's HTML and files, not the JSON API
        out.add((route.method, route.resource.canonical))
    return out


def spec_routes(spec: dict[str, Any] = SPEC) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def route_mismatch(app: web.Application, spec: dict[str, Any]) -> set[tuple[str, str]]:
    """Routes served but not documented, or documented but not served."""
    return app_routes(app) ^ spec_routes(spec)


def test_spec_lists_exactly_the_app_routes() -> None:
    assert route_mismatch(make_app(RecordingService()), SPEC) == set()
    # Every route but the stream's WebSocket upgrade comes from the table.
    assert app_routes() == {(r.method, r.path) for r in ROUTES} | {("GET", STREAM_PATH)}


def test_route_check_catches_an_undocumented_route() -> None:
    """Planted: a route added to the app behind the table's back is reported."""

    async def secret(request: web.Request) -> web.Response:
        return web.Response()

    app = make_app(RecordingService())
    app.router.add_get("/v1/secret", secret, allow_head=False)
    assert route_mismatch(app, SPEC) == {("GET", "/v1/secret")}
    spec = openapi_document()
    del spec["paths"]["/healthz"]
    assert route_mismatch(make_app(RecordingService()), spec) == {("GET", "/healthz")}


def test_a_route_added_to_the_table_is_served_and_documented() -> None:
    """The app and the document both read the route table: one entry adds both."""
    extra = Route(
        "GET", "/v1/extra", "extra", "An extra route", healthz, (Response(200, "ok", Health),)
    )
    routes = (*ROUTES, extra)
    app = make_app(RecordingService(), routes=routes)
    assert ("GET", "/v1/extra") in app_routes(app)
    assert route_mismatch(app, openapi_document(routes)) == set()


def test_every_error_status_is_documented_with_its_codes() -> None:
    responses = SPEC["components"]["responses"]
    for cls, status in HTTP_STATUS.items():
        name, _ = api_openapi.ERROR_RESPONSES[status]
        assert cls.code in responses[name]["description"], (cls, status)


def test_spec_operation_ids_are_unique() -> None:
    ids = [op["operationId"] for item in SPEC["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_each_signed_operation_documents_the_grant_it_needs() -> None:
    ops = {op["operationId"]: op for item in SPEC["paths"].values() for op in item.values()}
    assert ops["sendMessages"]["x-cmq-grant"] == {"action": "send", "on": "queue"}
    assert ops["exportMessages"]["x-cmq-grant"] == {"action": "admin", "on": "cluster"}
    assert ops["listQueues"]["x-cmq-grant"] == {"action": "signed", "on": "cluster"}
    assert "x-cmq-grant" not in ops["healthz"]


def _non_null(schema: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of an optional field's schema."""
    if "anyOf" not in schema:
        return schema
    [branch] = [b for b in schema["anyOf"] if b.get("type") != "null"]
    return branch  # type: ignore[no-any-return]


def test_spec_limits_come_from_the_model() -> None:
    schemas = SPEC["components"]["schemas"]
    attrs = schemas["QueueAttributes"]["properties"]
    for key, (lo, hi, default) in LIMITS.items():
        assert (attrs[key]["minimum"], attrs[key]["maximum"], attrs[key]["default"]) == (
            lo,
            hi,
            default,
        )
    assert schemas["SendRequest"]["properties"]["messages"]["maxItems"] == MAX_SEND_BATCH
    max_messages = _non_null(schemas["ReceiveRequest"]["properties"]["max_messages"])
    assert max_messages["maximum"] == MAX_RECEIVE_BATCH
    name = SPEC["components"]["parameters"]["QueueName"]["schema"]
    assert name["pattern"] == QUEUE_NAME.pattern


def test_spec_is_valid_openapi_3_1() -> None:
    from openapi_spec_validator import validate  # type: ignore[import-not-found,unused-ignore]

    assert SPEC["openapi"].startswith("3.1")
    validate(SPEC)


# --- conformance of real traffic (needs jsonschema)

# (method, path, body); the last two are refused by the app and must be by the spec too.
EXCHANGES: list[tuple[str, str, Any]] = [
    ("PUT", "/v1/queues/q", {"attributes": {"visibility_timeout": 5, "dead_letter_queue": "d"}}),
    ("PUT", "/v1/queues/q", None),
    ("GET", "/v1/queues", None),
    ("GET", "/v1/queues/q", None),
    ("PATCH", "/v1/queues/q", {"attributes": {"delay_seconds": 3}}),
    ("DELETE", "/v1/queues/q", None),
    ("POST", "/v1/queues/q/purge", None),
    (
        "POST",
        "/v1/queues/q/messages",
        {
            "messages": [
                {"body": "x", "attributes": {"k": "v"}, "dedup_id": "d1", "delay_seconds": 2},
                {"body_base64": "AP8=", "delay_seconds": None},
            ]
        },
    ),
    ("POST", "/v1/queues/q/messages/receive", {"max_messages": 5, "wait_seconds": 1}),
    ("POST", "/v1/queues/q/messages/receive", None),
    ("POST", "/v1/queues/q/messages/ack", {"receipts": ["r1", "bad"]}),
    (
        "POST",
        "/v1/queues/q/messages/visibility",
        {"entries": [{"receipt": "r1", "visibility_timeout": 9}]},
    ),
    ("POST", "/v1/queues/q/messages/nack", {"receipts": ["r1"], "delay_seconds": 4}),
    ("GET", "/healthz", None),
    ("GET", "/readyz", None),
    ("POST", "/v1/queues/q/messages", {"messages": []}),
    ("GET", "/v1/queues/bad.name", None),
]


def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema  # type: ignore[import-untyped,unused-ignore]

    root = {**schema, "components": SPEC["components"]}
    return jsonschema.Draft202012Validator(root)


def _request_schema(operation: dict[str, Any]) -> dict[str, Any]:
    return operation["requestBody"]["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


def _resolve(obj: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in obj:
        parts = obj["$ref"].removeprefix("#/").split("/")
        target: Any = SPEC
        for part in parts:
            target = target[part]
        obj = target
    return obj


def _operation(method: str, path: str) -> dict[str, Any]:
    """The spec's operation for a concrete request path."""
    for template, item in SPEC["paths"].items():
        if re.fullmatch(re.sub(r"\{[^}/]+\}", "[^/]+", template), path):
            return item[method.lower()]  # type: ignore[no-any-return]
    raise AssertionError(f"no operation for {method} {path}")


@pytest.mark.parametrize(("method", "path", "body"), EXCHANGES)
async def test_real_exchanges_conform_to_the_spec(
    client: Client, service: RecordingService, method: str, path: str, body: Any
) -> None:
    service.bad_receipts = frozenset({"bad"})
    service.to_receive = [
        ReceivedMessage("i1", 1, b"text", False, "r1", 1, 1_700_000_000_000, (("k", "v"),)),
        ReceivedMessage("i2", 2, b"\x00", True, "r2", 3, 1_700_000_000_001, ()),
    ]
    operation = _operation(method, path)
    resp = await client.request(method, path, json=body)
    if body is None:
        assert not operation.get("requestBody", {}).get("required", False)
    elif resp.status < 400:
        _validator(_request_schema(operation)).validate(body)
    else:
        assert not _validator(_request_schema(operation)).is_valid(body)
    response = _resolve(operation["responses"][str(resp.status)])
    schema = response["content"]["application/json"]["schema"]
    _validator(schema).validate(await resp.json())


@pytest.mark.parametrize(
    ("target", "error", "method", "path", "body"),
    [
        ("get_queue", QueueNotFound("gone"), "GET", "/v1/queues/q", None),
        ("create_queue", QueueAlreadyExists("differs"), "PUT", "/v1/queues/q", None),
        (
            "send",
            Unavailable("no leader"),
            "POST",
            "/v1/queues/q/messages",
            {"messages": [{"body": "x"}]},
        ),
    ],
)
async def test_error_responses_are_declared(
    client: Client,
    service: RecordingService,
    *,
    target: str,
    error: Exception,
    method: str,
    path: str,
    body: Any,
) -> None:
    service.fail[target] = error
    resp = await client.request(method, path, json=body)
    response = _resolve(_operation(method, path)["responses"][str(resp.status)])
    _validator(response["content"]["application/json"]["schema"]).validate(await resp.json())
    if resp.status == 503:
        assert "Retry-After" in response["headers"]


def _has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    return False


def _schema_expressible(body: dict[str, Any]) -> bool:
    """Whether JSON Schema can state why ``body`` is refused. It cannot for a cross-field rule
    (max_receive_count needs a DLQ), base64 validity (contentEncoding is only an annotation),
    and 1.0 where an integer is expected (JSON Schema counts it as an integer; the API does
    not)."""
    text = repr(body)
    if "'max_receive_count': 3}" in text or _has_integral_float(body):
        return False
    return "body_base64" not in text or "'body_base64': 5" in text


def test_spec_rejects_the_bad_input_table() -> None:
    """Every JSON-object body the app refuses is refused by the spec's request schema, except
    for rules JSON Schema cannot state (cross-field, base64 validity)."""
    checked = 0
    for case in bad_input_cases():
        method, path, body, status, _code = case.values
        if not isinstance(body, dict) or status != 400 or not _schema_expressible(body):
            continue
        if "/v1/queues/q" not in path:
            continue  # a bad queue name: a path parameter, not the body
        operation = _operation(method, path)
        assert not _validator(_request_schema(operation)).is_valid(body), case.id
        checked += 1
    assert checked > 100
