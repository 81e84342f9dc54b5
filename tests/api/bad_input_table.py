"""The bad-input table: every endpoint that names a queue (`QUEUE_ENDPOINTS`) and every case
of malformed input with the status and error code it must get (`bad_input_cases`).

Shared by the bad-input suite (tests/api/test_bad_input.py), the error-shape tests and the
OpenAPI check that the spec refuses the same bodies.
"""

from __future__ import annotations

from typing import Any

import pytest

from cmq.model import MAX_ACK_BATCH, MAX_SEND_BATCH
from cmq.segment_values import MAX_CLAIM_TTL_MS, MAX_SEGMENTS_PER_CALL
from tests.api.conftest import SMALL_REQUEST_CAP

Q = "/v1/queues/q"
M = f"{Q}/messages"

# Every endpoint that names a queue, with a body it would accept.
QUEUE_ENDPOINTS: list[tuple[str, str, Any]] = [
    ("PUT", "/v1/queues/{}", {}),
    ("GET", "/v1/queues/{}", None),
    ("PATCH", "/v1/queues/{}", {"attributes": {"delay_seconds": 1}}),
    ("DELETE", "/v1/queues/{}", None),
    ("POST", "/v1/queues/{}/purge", None),
    ("POST", "/v1/queues/{}/rewind", {"since": "2026-11-26T10:00:00Z"}),
    ("POST", "/v1/queues/{}/messages", {"messages": [{"body": "x"}]}),
    ("POST", "/v1/queues/{}/messages/receive", {}),
    ("POST", "/v1/queues/{}/messages/ack", {"receipts": ["r"]}),
    (
        "POST",
        "/v1/queues/{}/messages/visibility",
        {"entries": [{"receipt": "r", "visibility_timeout": 1}]},
    ),
    ("POST", "/v1/queues/{}/messages/nack", {"receipts": ["r"]}),
    ("GET", "/v1/queues/{}/messages?peek=1", None),
    ("GET", "/v1/queues/{}/segments", None),
    ("GET", "/v1/queues/{}/segments/1/records", None),
    ("POST", "/v1/queues/{}/segments/claim", {"batch_id": "b-1", "segments": [1]}),
    ("POST", "/v1/queues/{}/segments/archived", {"batch_id": "b-1", "segments": [1]}),
    ("GET", "/v1/queues/{}/export?limit=1", None),
    ("POST", "/v1/queues/{}/import", {"expect_sent": 0, "messages": [{"id": "i", "body": "x"}]}),
]
# Endpoints that read a JSON body.
BODY_ENDPOINTS = [(m, p, ok) for m, p, ok in QUEUE_ENDPOINTS if m != "GET"]

BAD_NAMES = ["has.dot", "x" * 81, "sp%20ace", "%C3%A9t%C3%A9", "semi;colon", "a+b"]
INVALID_JSON = [
    b"{",
    b"{'a': 1}",
    b'{"a": 1,}',
    b"\xff\xfe",
    b"NaN",
    b'{"a": 1e999}',
    b'{"a": "\\ud800"}',
]
NON_OBJECT_JSON = [b"[]", b'"text"', b"1", b"null", b"true", b"[{}]"]


def bad_input_cases() -> list[Any]:
    """One ``pytest.param(method, path, body, status, code, id=...)`` per case."""
    cases: list[Any] = []

    def case(id: str, *method_path_body_status_code: Any) -> None:
        cases.append(pytest.param(*method_path_body_status_code, id=id))

    def batch_limits(what: str, path: str, key: str, entry: Any) -> None:
        """A POST to ``path`` whose list ``key`` is empty, and one with an ``entry`` too many."""
        case(f"{what} empty", "POST", path, {key: []}, 400, "EmptyBatch")
        over = {key: [entry] * (MAX_ACK_BATCH + 1)}
        case(f"{what} over limit", "POST", path, over, 400, "TooManyEntries")

    for method, template, ok in QUEUE_ENDPOINTS:
        ep = f"{method} {template.format('{name}')}"
        for name in BAD_NAMES:
            case(
                f"{ep} name={name[:12]}", method, template.format(name), ok, 400, "InvalidQueueName"
            )
    for method, template, _ in BODY_ENDPOINTS:
        ep = f"{method} {template.format('{name}')}"
        path = template.format("q")
        for raw in INVALID_JSON:
            case(f"{ep} json={raw!r}", method, path, raw, 400, "InvalidJson")
        for raw in NON_OBJECT_JSON:
            case(f"{ep} json={raw.decode()}", method, path, raw, 400, "InvalidJson")
        case(f"{ep} unknown-field", method, path, {"surprise": 1}, 400, "InvalidParameter")
        big = b'{"pad": "' + b"x" * SMALL_REQUEST_CAP + b'"}'
        case(f"{ep} oversize", method, path, big, 413, "RequestTooLarge")

    bad = "InvalidParameter"
    # --- GET /v1/queues/{name}/messages?peek=N
    for query in ("", "?peek=0", "?peek=101", "?peek=x", "?peek=1.5", "?peek=1&wait=2"):
        case(f"GET {M}{query}", "GET", f"{M}{query}", None, 400, bad)
    attrs: Any
    body: Any
    message: Any
    entry: Any
    # --- PUT /v1/queues/{name}
    for attrs in (
        [],
        "x",
        1,
        {"colour": "red"},
        {"visibility_timeout": True},
        {"visibility_timeout": 30.0},
        {"visibility_timeout": "30"},
        {"visibility_timeout": -1},
        {"visibility_timeout": 43_201},
        {"delay_seconds": 901},
        {"message_retention_seconds": 59},
        {"max_message_size": 1023},
        {"max_message_size": 1_048_577},
        {"receive_wait_seconds": 21},
        {"max_receive_count": 3},
        {"max_receive_count": 1001, "dead_letter_queue": "dlq"},
        {"visibility_timeout": None},
        {"fifo": "true"},
        {"content_based_deduplication": 1},
        {"priorities": 0},
        {"priorities": 33},
        {"priorities": "4"},
    ):
        case(f"PUT attributes={attrs!r}"[:60], "PUT", Q, {"attributes": attrs}, 400, bad)
    case(
        "PUT dlq bad name",
        "PUT",
        Q,
        {"attributes": {"dead_letter_queue": "no way"}},
        400,
        "InvalidQueueName",
    )
    case(
        "PUT dlq not string",
        "PUT",
        Q,
        {"attributes": {"dead_letter_queue": 5}},
        400,
        "InvalidQueueName",
    )

    # --- PATCH /v1/queues/{name}
    for body in (
        None,
        {},
        {"attributes": None},
        {"attributes": {}},
        {"attributes": []},
        {"attributes": {"delay_seconds": 901}},
        {"attributes": {"delay_seconds": False}},
        {"attributes": {"colour": 1}},
        {"attributes": {"delay_seconds": 1}, "extra": 1},
    ):
        case(f"PATCH body={body!r}"[:60], "PATCH", Q, body, 400, bad)

    # --- DELETE and purge take no fields
    case("DELETE with a field", "DELETE", Q, {"force": True}, 400, bad)
    case("purge with a field", "POST", f"{Q}/purge", {"all": True}, 400, bad)

    # --- POST .../rewind: since is an RFC 3339 time with a zone
    for body in (
        None,
        {},
        {"since": None},
        {"since": "2026-11-26T10:00:00"},
        {"since": "2026-11-26T10:00Z"},
        {"since": "yesterday"},
        {"since": 1764151200},
        {"since": "2026-11-26T10:00:00Z", "until": "2026-11-27T10:00:00Z"},
    ):
        case(f"rewind body={body!r}"[:60], "POST", f"{Q}/rewind", body, 400, bad)

    # --- POST .../messages
    too_many = {"messages": [{"body": "x"}] * (MAX_SEND_BATCH + 1)}
    case("send over batch limit", "POST", M, too_many, 400, "TooManyEntries")
    case("send empty batch", "POST", M, {"messages": []}, 400, "EmptyBatch")
    for body in (
        None,
        {},
        {"messages": None},
        {"messages": {}},
        {"messages": "x"},
        {"messages": 1},
    ):
        case(f"send body={body!r}", "POST", M, body, 400, bad)
    for message in (
        1,
        "x",
        None,
        [],
        {},
        {"body": None},
        {"body": "x", "body_base64": "eA=="},
        {"body": 5},
        {"body": ["x"]},
        {"body": {"x": 1}},
        {"body_base64": "!!!!"},
        {"body_base64": "abc"},
        {"body_base64": "YWJj\n"},
        {"body_base64": "YW Jj"},
        {"body_base64": "YWJj-_=="},
        {"body_base64": "é"},
        {"body_base64": 5},
        {"body": "x", "delay_seconds": -1},
        {"body": "x", "delay_seconds": 604_801},
        {"body": "x", "deliver_at": "2026-11-26T10:00:00"},
        {"body": "x", "deliver_at": "tomorrow"},
        {"body": "x", "deliver_at": 1764151200},
        {"body": "x", "ttl_seconds": 0},
        {"body": "x", "ttl_seconds": "60"},
        {"body": "x", "delay_seconds": 1.5},
        {"body": "x", "delay_seconds": 1.0},
        {"body": "x", "delay_seconds": True},
        {"body": "x", "delay_seconds": "5"},
        {"body": "x", "attributes": []},
        {"body": "x", "attributes": "k=v"},
        {"body": "x", "attributes": {f"k{i}": "v" for i in range(11)}},
        {"body": "x", "attributes": {"": "v"}},
        {"body": "x", "attributes": {"k" * 257: "v"}},
        {"body": "x", "attributes": {"k": 5}},
        {"body": "x", "attributes": {"k": None}},
        {"body": "x", "attributes": {"k": {"v": 1}}},
        {"body": "x", "dedup_id": ""},
        {"body": "x", "dedup_id": "d" * 129},
        {"body": "x", "dedup_id": 5},
        {"body": "x", "group_id": ""},
        {"body": "x", "group_id": "g" * 129},
        {"body": "x", "group_id": "gr\u00fcn"},
        {"body": "x", "group_id": "a b"},
        {"body": "x", "group_id": 7},
        {"body": "x", "priority": -1},
        {"body": "x", "priority": 32},
        {"body": "x", "priority": "1"},
        {"body": "x", "priority": 1.5},
        {"body": "x", "priority": None},
    ):
        # the bad message is not the first one: the whole batch is refused
        body = {"messages": [{"body": "fine"}, message]}
        case(f"send message={message!r}"[:70], "POST", M, body, 400, bad)

    # --- the archive read side
    S = f"{Q}/segments"
    for query in ("state=bogus", "state=", "state=ALL", "colour=red"):
        case(f"segments ?{query}", "GET", f"{S}?{query}", None, 400, bad)
    for first in ("abc", "0", "-1", "1.5", "99999999999999999999"):
        case(f"records first_seq={first}", "GET", f"{S}/{first}/records", None, 400, bad)
    case("records with a query", "GET", f"{S}/1/records?x=1", None, 400, bad)
    for path in (f"{S}/claim", f"{S}/archived"):
        kind = path.rsplit("/", 1)[1]
        for body in (
            None,
            {},
            {"segments": [1]},
            {"batch_id": "b"},
            {"batch_id": "", "segments": [1]},
            {"batch_id": "has space", "segments": [1]},
            {"batch_id": "b" * 65, "segments": [1]},
            {"batch_id": 5, "segments": [1]},
            {"batch_id": "b", "segments": [0]},
            {"batch_id": "b", "segments": [-3]},
            {"batch_id": "b", "segments": ["1"]},
            {"batch_id": "b", "segments": [True]},
            {"batch_id": "b", "segments": [1.5]},
            {"batch_id": "b", "segments": 1},
            {"batch_id": "b", "segments": [1], "extra": 1},
        ):
            case(f"{kind} body={body!r}"[:60], "POST", path, body, 400, bad)
        case(
            f"{kind} no segments",
            "POST",
            path,
            {"batch_id": "b", "segments": []},
            400,
            "EmptyBatch",
        )
        many = {"batch_id": "b", "segments": list(range(1, MAX_SEGMENTS_PER_CALL + 2))}
        case(f"{kind} too many segments", "POST", path, many, 400, "TooManyEntries")
    for ttl in (0, -1, MAX_CLAIM_TTL_MS + 1, 1.5, "60", True):
        body = {"batch_id": "b", "segments": [1], "ttl_ms": ttl}
        case(f"claim ttl_ms={ttl!r}", "POST", f"{S}/claim", body, 400, bad)
    case(
        "archived with ttl",
        "POST",
        f"{S}/archived",
        {"batch_id": "b", "segments": [1], "ttl_ms": 5},
        400,
        bad,
    )

    # --- POST .../messages/receive
    R = f"{M}/receive"
    case("receive max_messages=101", "POST", R, {"max_messages": 101}, 400, "TooManyEntries")
    for body in (
        {"max_messages": 0},
        {"max_messages": -1},
        {"max_messages": True},
        {"max_messages": 1.0},
        {"max_messages": "1"},
        {"visibility_timeout": -1},
        {"visibility_timeout": 43_201},
        {"visibility_timeout": "30"},
        {"wait_seconds": 21},
        {"wait_seconds": -1},
        {"wait_seconds": 1.5},
        {"wait_seconds": False},
        {"attempt_id": ""},
        {"attempt_id": "a" * 129},
        {"attempt_id": 5},
        {"wait_time_seconds": 5},
    ):
        case(f"receive body={body!r}", "POST", R, body, 400, bad)
    # beyond 64 bits: orjson reads it as a float, which is not an integer
    case(
        "receive max_messages=10**30",
        "POST",
        R,
        b'{"max_messages": 10' + b"0" * 30 + b"}",
        400,
        bad,
    )

    # --- POST .../messages/ack
    A = f"{M}/ack"
    batch_limits("ack", A, "receipts", "r")
    for body in (
        None,
        {},
        {"receipts": None},
        {"receipts": "r"},
        {"receipts": {"r": 1}},
        {"receipts": ["r", 5]},
        {"receipts": ["r", ""]},
        {"receipts": ["r", None]},
        {"receipts": [["r"]]},
        {"receipts": ["r"], "all": True},
    ):
        case(f"ack body={body!r}", "POST", A, body, 400, bad)

    # --- POST .../messages/visibility
    V = f"{M}/visibility"
    batch_limits("visibility", V, "entries", {"receipt": "r", "visibility_timeout": 1})
    for entry in (
        "r",
        None,
        {"receipt": "r"},
        {"visibility_timeout": 5},
        {"receipt": "r", "visibility_timeout": None},
        {"receipt": "r", "visibility_timeout": 43_201},
        {"receipt": "r", "visibility_timeout": -1},
        {"receipt": "r", "visibility_timeout": True},
        {"receipt": "r", "visibility_timeout": "5"},
        {"receipt": "r", "visibility_timeout": 5.0},
        {"receipt": "", "visibility_timeout": 5},
        {"receipt": 5, "visibility_timeout": 5},
        {"receipt": "r", "visibility_timeout": 5, "extra": 1},
    ):
        body = {"entries": [{"receipt": "ok", "visibility_timeout": 1}, entry]}
        case(f"visibility entry={entry!r}", "POST", V, body, 400, bad)
    for body in (None, {}, {"entries": None}, {"entries": {}}, {"receipts": ["r"]}):
        case(f"visibility body={body!r}", "POST", V, body, 400, bad)

    # --- POST .../messages/nack
    N = f"{M}/nack"
    batch_limits("nack", N, "receipts", "r")
    for body in (
        None,
        {},
        {"receipts": "r"},
        {"receipts": [5]},
        {"receipts": ["r"], "delay_seconds": 901},
        {"receipts": ["r"], "delay_seconds": -1},
        {"receipts": ["r"], "delay_seconds": True},
        {"receipts": ["r"], "delay_seconds": 0.5},
        {"receipts": ["r"], "visibility_timeout": 5},
    ):
        case(f"nack body={body!r}", "POST", N, body, 400, bad)
    return cases
