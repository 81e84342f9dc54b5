"""schemathesis against a real single node, from the OpenAPI document it serves at
``/openapi.json`` (the native API): per operation, then stateful (links between operations).

Every response must not be a 5xx, must conform to the document (status, content type, body
schema, headers), and a 4xx must carry ``{"error": {"code", "message"}}`` with a code. Requests
that the document says are invalid must be refused with a 4xx.

Bounded by ``FUZZ_EXAMPLES`` (examples per operation and stateful steps; small in `make test`,
`make fuzz` runs more). Membership changes (join, drain, activate, remove a node) are left
out: on a one-node cluster they would only take the node out from under the test.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.core.parameters import ParameterLocation
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi.checks import negative_data_rejection as negative_rejection
from schemathesis.specs.openapi.checks import positive_data_acceptance as positive_acceptance

from api.openapi import openapi_document
from api.routes import ROUTES
from tests.cmq.cluster import CmqCluster, request

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))
MAX_WAIT_SECONDS = 1
"""Long polls are cut to this (a generated ``wait_seconds`` of 20 would only make the run slow)."""
MEMBERSHIP = ("joinNode", "drainNode", "activateNode", "removeNode")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CmqCluster]:
    """One ``cmq serve`` process (one data group)."""
    with CmqCluster(tmp_path_factory.mktemp("schema-node"), n=1, groups=1).running() as cluster:
        yield cluster


def _integers(value: Any) -> Any:
    """``value`` with integral floats (``3.0``) as integers, at any depth. JSON Schema counts
    ``3.0`` as an ``integer``; cmq's decoder deliberately refuses a fraction or exponent in an
    integer field (``InvalidParameter``), so a generator's ``3.0`` is sent as ``3``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integers(v) for v in value]
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    return value


def _request_body(_: Any, body: Any) -> Any:
    """The body sent: `_integers`, and long polls (a receive's, a queue's default) cut to
    `MAX_WAIT_SECONDS`."""
    body = _integers(body)
    if isinstance(body, dict) and isinstance(body.get("wait_seconds"), int):
        body = {**body, "wait_seconds": min(body["wait_seconds"], MAX_WAIT_SECONDS)}
    attributes = body.get("attributes") if isinstance(body, dict) else None
    if isinstance(attributes, dict) and isinstance(attributes.get("receive_wait_seconds"), int):
        wait = min(attributes["receive_wait_seconds"], MAX_WAIT_SECONDS)
        body = {**body, "attributes": {**attributes, "receive_wait_seconds": wait}}
    return body


@pytest.fixture(scope="module")
def api_schema(node: CmqCluster) -> BaseSchema:
    schema = schemathesis.openapi.from_url(f"{node.http[1]}/openapi.json", timeout=10)
    schema.hook("map_body")(_request_body)  # the stateful run's requests
    return schema.exclude(operation_id=list(MEMBERSHIP))


def _check(case: Case, response: Any) -> None:
    """The properties of one exchange (schemathesis' checks, plus our error shape). A case of
    the negative mode that schemathesis could not make invalid (an operation whose inputs are
    all optional, or whose "invalid" body is an omitted optional one, or whitespace, which
    `api.decoding.decode` reads as an omitted body) is not held to "invalid input is refused".
    A valid-looking request may be refused with a 400 for a rule the document cannot state
    (``max_receive_count`` needs a ``dead_letter_queue``; ``body_base64`` must be base64; a
    data group id beyond any group), so schemathesis' "schema-valid request accepted" check is
    left out: such a refusal is held to the error shape below instead."""
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text}"
    meta = case.meta
    negative = {k for k, c in meta.components.items() if c.mode.is_negative} if meta else set()
    if not isinstance(case.body, dict | list | str | int | float | bool | bytes | None):
        negative.discard(ParameterLocation.BODY)  # an omitted body, and the body is optional
    if isinstance(case.body, bytes | str) and not case.body.strip():
        negative.discard(ParameterLocation.BODY)  # whitespace only: an omitted body (documented)
    invalid = bool(negative)
    excluded = [positive_acceptance] + ([] if invalid else [negative_rejection])
    case.validate_response(response, excluded_checks=excluded)
    if 400 <= response.status_code < 500 and case.operation.path != "/metrics":
        error = response.json()["error"]
        assert isinstance(error["code"], str) and error["code"], response.text


def _has_inputs(operation: Any) -> bool:
    raw = operation.definition.raw
    return bool(raw.get("parameters") or raw.get("requestBody") or operation.path_parameters)


OPERATIONS = sorted(
    op["operationId"]
    for ops in openapi_document(ROUTES)["paths"].values()
    for op in ops.values()
    if op["operationId"] not in MEMBERSHIP
)
"""The operation ids, to name the tests (the requests come from the document the node serves)."""


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("operation_id", OPERATIONS)
def test_operation(api_schema: BaseSchema, operation_id: str, mode: GenerationMode) -> None:
    """Each operation: requests that fit the document, then requests that do not."""
    operation = api_schema.find_operation_by_id(operation_id)  # type: ignore[attr-defined]
    if mode is GenerationMode.NEGATIVE and not _has_inputs(operation):
        pytest.skip("no parameters or body: no invalid request to make")

    @given(operation.as_strategy(mode))
    @SETTINGS
    def exchange(case: Case) -> None:
        if mode is GenerationMode.POSITIVE:
            case.body = _request_body(None, case.body)
        _check(case, case.call(timeout=15))

    exchange()


def test_stateful(api_schema: BaseSchema) -> None:
    """Sequences of calls following the document's links (create a queue, send to it, receive,
    ack with the receipts it returned, ...)."""

    class Workflow(api_schema.as_state_machine()):  # type: ignore[misc]
        def validate_response(self, response: Any, case: Case, **kwargs: Any) -> None:
            _check(case, response)

    Workflow.run(
        settings=settings(
            SETTINGS,
            max_examples=max(1, EXAMPLES // 3),
            stateful_step_count=10,
        )
    )


def test_document_is_served_whole(node: CmqCluster, api_schema: BaseSchema) -> None:
    """The run covers every documented operation but the membership changes."""
    ids = {op.ok().definition.raw.get("operationId") for op in api_schema.get_all_operations()}
    assert "sendMessages" in ids and "receiveMessages" in ids
    assert not ids & set(MEMBERSHIP)
    assert Path(node.root).exists()


@pytest.mark.parametrize("field", ["segments", "ttl_ms"])
def test_claim_beyond_64_bits_is_refused(node: CmqCluster, field: str) -> None:
    """Found by this module: a segment seq beyond a signed 64-bit integer reached the command
    encoder and failed there (500 InternalError); it is a 400 InvalidParameter now, and the
    queue is not touched."""
    url, name = node.http[1], "claim-range"
    assert request(url, "PUT", f"/v1/queues/{name}")[0] in (200, 201)
    big = str(2**64 + 5)
    value = f"[{big}]" if field == "segments" else big
    fields = {"batch_id": '"b1"', "segments": "[1]", "ttl_ms": "1000", field: value}
    raw = "{" + ",".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    post = urllib.request.Request(
        f"{url}/v1/queues/{name}/segments/claim",
        data=raw.encode(),  # by hand: JSON encoders refuse integers beyond 64 bits
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=30)
    reply = json.loads(refused.value.read())
    assert (refused.value.code, reply["error"]["code"]) == (400, "InvalidParameter"), reply
    status, listing = request(url, "GET", f"/v1/queues/{name}/segments")
    assert status == 200 and all(s["claim"] is None for s in listing["segments"])
