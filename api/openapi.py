"""The OpenAPI 3.1 description of the native JSON API, as data (served at ``/openapi.json``).

Limits come from `cmq.model` and `api.schemas`, so the document cannot disagree with the code
about them; a test checks that its paths and methods are exactly the application's routes.
"""

from __future__ import annotations

from typing import Any

from api.schemas import (
    DELAY_RANGE,
    MAX_NACK_BATCH,
    MAX_REQUEST_BYTES,
    MAX_VISIBILITY_BATCH,
    VISIBILITY_RANGE,
    WAIT_RANGE,
)
from cmq.model import (
    LIMITS,
    MAX_ACK_BATCH,
    MAX_ATTRIBUTE_NAME,
    MAX_DEDUP_ID,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
    QUEUE_NAME,
    QueueStats,
)

Schema = dict[str, Any]

ERROR_CODES = {
    400: "InvalidParameter, InvalidQueueName, InvalidJson, EmptyBatch, TooManyEntries, "
    "ReceiptHandleIsInvalid",
    404: "QueueNotFound, NotFound",
    405: "MethodNotAllowed",
    409: "QueueAlreadyExists",
    413: "MessageTooLarge, RequestTooLarge",
    429: "(reserved for rate limiting; carries Retry-After)",
    500: "InternalError",
    503: "Unavailable, OutcomeUnknown, Overloaded",
}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _int(lo: int, hi: int | None = None, *, nullable: bool = False, **extra: Any) -> Schema:
    schema: Schema = {"type": ["integer", "null"] if nullable else "integer", "minimum": lo}
    if hi is not None:
        schema["maximum"] = hi
    schema.update(extra)
    return schema


def _obj(properties: dict[str, Schema], required: list[str] | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    schema.update(extra)
    return schema


def _attribute_properties() -> dict[str, Schema]:
    props: dict[str, Schema] = {
        key: _int(lo, hi, default=default) for key, (lo, hi, default) in LIMITS.items()
    }
    props["dead_letter_queue"] = {
        "type": ["string", "null"],
        "pattern": QUEUE_NAME.pattern,
        "description": "Queue that receives messages received max_receive_count times.",
    }
    props["max_receive_count"]["description"] = (
        "Receives before a message is dead-lettered; 0 = no limit. > 0 needs dead_letter_queue."
    )
    return props


def _receipts(limit: int) -> Schema:
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": limit,
        "items": {"type": "string", "minLength": 1},
    }


def _schemas() -> dict[str, Schema]:
    attrs = _attribute_properties()
    return {
        "Error": _obj(
            {
                "error": _obj(
                    {
                        "code": {
                            "type": "string",
                            "description": "Machine-readable error code; see the responses.",
                        },
                        "message": {"type": "string"},
                    },
                    ["code", "message"],
                )
            },
            ["error"],
        ),
        "QueueAttributes": _obj(attrs, list(attrs)),
        "QueueAttributesInput": _obj(
            attrs,
            description="Any subset of the attributes; unknown names are rejected.",
        ),
        "QueueStats": _obj(
            {f: _int(0) for f in QueueStats.__dataclass_fields__},
            list(QueueStats.__dataclass_fields__),
        ),
        "CreateQueueRequest": _obj({"attributes": _ref("QueueAttributesInput")}),
        "CreateQueueResponse": _obj(
            {
                "name": {"type": "string"},
                "created": {"type": "boolean"},
                "attributes": _ref("QueueAttributes"),
            },
            ["name", "created", "attributes"],
        ),
        "QueueList": _obj(
            {
                "queues": {
                    "type": "array",
                    "items": _obj({"name": {"type": "string"}}, ["name"]),
                }
            },
            ["queues"],
        ),
        "Queue": _obj(
            {
                "name": {"type": "string"},
                "attributes": _ref("QueueAttributes"),
                "stats": _ref("QueueStats"),
            },
            ["name", "attributes", "stats"],
        ),
        "SetAttributesRequest": _obj(
            {"attributes": {**_ref("QueueAttributesInput"), "minProperties": 1}},
            ["attributes"],
        ),
        "QueueAttributesResponse": _obj(
            {"name": {"type": "string"}, "attributes": _ref("QueueAttributes")},
            ["name", "attributes"],
        ),
        "DeleteQueueResponse": _obj(
            {"name": {"type": "string"}, "deleted": {"const": True}}, ["name", "deleted"]
        ),
        "PurgeResponse": _obj({"purged": _int(0)}, ["purged"]),
        "EmptyRequest": _obj({}, description="No fields; the body may be omitted."),
        "MessageAttributes": {
            "type": "object",
            "maxProperties": MAX_MESSAGE_ATTRIBUTES,
            "propertyNames": {"minLength": 1, "maxLength": MAX_ATTRIBUTE_NAME},
            "additionalProperties": {"type": "string"},
        },
        "OutgoingMessage": _obj(
            {
                "body": {"type": ["string", "null"], "description": "UTF-8 text body."},
                "body_base64": {
                    "type": ["string", "null"],
                    "contentEncoding": "base64",
                    "description": "Binary body, standard padded base64 without whitespace.",
                },
                "delay_seconds": _int(
                    *DELAY_RANGE, nullable=True, description="null: the queue's delay_seconds."
                ),
                "attributes": {"oneOf": [_ref("MessageAttributes"), {"type": "null"}]},
                "dedup_id": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": MAX_DEDUP_ID,
                    "description": "A resend with the same dedup_id within 5 minutes is not "
                    "stored again; it returns the original id and seq.",
                },
            },
            oneOf=[
                {"required": ["body"], "properties": {"body": {"type": "string"}}},
                {"required": ["body_base64"], "properties": {"body_base64": {"type": "string"}}},
            ],
            description="Exactly one of body and body_base64 (the other omitted or null). The "
            "body may not exceed the queue's max_message_size (413 MessageTooLarge).",
        ),
        "SendRequest": _obj(
            {
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_SEND_BATCH,
                    "items": _ref("OutgoingMessage"),
                }
            },
            ["messages"],
        ),
        "SendResponse": _obj(
            {
                "messages": {
                    "type": "array",
                    "items": _obj({"id": {"type": "string"}, "seq": _int(0)}, ["id", "seq"]),
                }
            },
            ["messages"],
        ),
        "ReceiveRequest": _obj(
            {
                "max_messages": _int(1, MAX_RECEIVE_BATCH, nullable=True, default=1),
                "visibility_timeout": _int(
                    *VISIBILITY_RANGE,
                    nullable=True,
                    description="Lease length in seconds; null: the queue's visibility_timeout.",
                ),
                "wait_seconds": _int(
                    *WAIT_RANGE,
                    nullable=True,
                    description="Long poll: wait up to this long for a message; null: the "
                    "queue's receive_wait_seconds.",
                ),
            },
            description="Every field is optional; the body may be omitted.",
        ),
        "ReceivedMessage": _obj(
            {
                "id": {"type": "string"},
                "seq": _int(0),
                "body": {"type": "string", "description": "Present if sent as body."},
                "body_base64": {
                    "type": "string",
                    "contentEncoding": "base64",
                    "description": "Present if sent as body_base64.",
                },
                "receipt": {
                    "type": "string",
                    "description": "Opaque handle for ack / visibility / nack.",
                },
                "receive_count": _int(1),
                "sent_at": _int(0, description="Milliseconds since the Unix epoch."),
                "attributes": _ref("MessageAttributes"),
            },
            ["id", "seq", "receipt", "receive_count", "sent_at", "attributes"],
            oneOf=[{"required": ["body"]}, {"required": ["body_base64"]}],
        ),
        "ReceiveResponse": _obj(
            {"messages": {"type": "array", "items": _ref("ReceivedMessage")}}, ["messages"]
        ),
        "AckRequest": _obj({"receipts": _receipts(MAX_ACK_BATCH)}, ["receipts"]),
        "VisibilityRequest": _obj(
            {
                "entries": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_VISIBILITY_BATCH,
                    "items": _obj(
                        {
                            "receipt": {"type": "string", "minLength": 1},
                            "visibility_timeout": _int(*VISIBILITY_RANGE),
                        },
                        ["receipt", "visibility_timeout"],
                    ),
                }
            },
            ["entries"],
        ),
        "NackRequest": _obj(
            {
                "receipts": _receipts(MAX_NACK_BATCH),
                "delay_seconds": _int(*DELAY_RANGE, nullable=True, default=0),
            },
            ["receipts"],
        ),
        "ResultsResponse": _obj(
            {
                "results": {
                    "type": "array",
                    "items": _obj(
                        {
                            "receipt": {"type": "string"},
                            "ok": {"type": "boolean"},
                            "error": {
                                "type": "string",
                                "description": "ReceiptHandleIsInvalid, LeaseStale, "
                                "MessageNotInflight, ...",
                            },
                        },
                        ["receipt", "ok"],
                    ),
                }
            },
            ["results"],
        ),
        "Health": _obj({"status": {"const": "ok"}}, ["status"]),
        "Ready": _obj({"ready": {"type": "boolean"}}, ["ready"]),
        "ClusterStatus": _obj(
            {
                "node": {"type": "integer"},
                "queues": {"type": "integer"},
                "placement": {
                    "type": "object",
                    "description": "queue name -> data group",
                    "additionalProperties": {"type": "integer"},
                },
                "nodes": {
                    "type": "object",
                    "description": "the catalog's nodes: id -> peer address and data directories",
                    "additionalProperties": _obj(
                        {
                            "address": {"type": "string"},
                            "data_dirs": {"type": "array", "items": {"type": "string"}},
                        },
                        ["address", "data_dirs"],
                    ),
                },
                "data_groups": {
                    "type": "object",
                    "description": "the catalog's data groups: replicas, data dir per replica",
                    "additionalProperties": _obj(
                        {
                            "replicas": {"type": "array", "items": {"type": "integer"}},
                            "data_dirs": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                            "queues": {"type": "integer"},
                        },
                        ["replicas", "data_dirs", "queues"],
                    ),
                },
                "groups": {
                    "type": "object",
                    "additionalProperties": _obj(
                        {
                            "role": {"type": "string"},
                            "term": {"type": "integer"},
                            "leader": {"type": "integer"},
                            "commit": {"type": "integer"},
                            "applied": {"type": "integer"},
                            "last_index": {"type": "integer"},
                            "voters": {"type": "array", "items": {"type": "integer"}},
                            "lag": {
                                "type": "object",
                                "additionalProperties": {"type": "integer"},
                            },
                        },
                        ["role", "term", "leader", "commit", "applied", "voters", "lag"],
                    ),
                },
            },
            ["node", "queues", "groups"],
        ),
    }


def _error_response(status: int, description: str) -> Schema:
    response: Schema = {
        "description": f"{description}. Codes: {ERROR_CODES[status]}.",
        "content": {"application/json": {"schema": _ref("Error")}},
    }
    if status in (429, 503):
        response["headers"] = {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}}
    return response


ERROR_RESPONSES: dict[str, tuple[int, str]] = {
    "BadRequest": (400, "The request is malformed; nothing changed"),
    "NotFound": (404, "The queue (or route) does not exist"),
    "MethodNotAllowed": (405, "The path does not support this method"),
    "Conflict": (409, "The queue exists with different attributes"),
    "TooLarge": (413, "A message or the request body is too large"),
    "TooManyRequests": (429, "Rate limited; retry after Retry-After seconds"),
    "Internal": (500, "Unexpected server error (details are in the server log)"),
    "Unavailable": (
        503,
        "No leader reachable, overloaded, or (OutcomeUnknown) a change whose outcome is unknown; "
        "retry after Retry-After seconds",
    ),
}


def _ok(status: int, description: str, schema: str) -> dict[str, Schema]:
    return {
        str(status): {
            "description": description,
            "content": {"application/json": {"schema": _ref(schema)}},
        }
    }


def _errors(*names: str) -> dict[str, Schema]:
    chosen = ("BadRequest", *names, "Internal", "Unavailable")
    return {
        str(ERROR_RESPONSES[n][0]): {"$ref": f"#/components/responses/{n}"}
        for n in sorted(set(chosen), key=lambda n: ERROR_RESPONSES[n][0])
    }


def _op(
    operation_id: str,
    summary: str,
    responses: dict[str, Schema],
    *,
    request: str | None = None,
    request_required: bool = True,
    queue: bool = True,
    description: str | None = None,
) -> Schema:
    op: Schema = {"operationId": operation_id, "summary": summary, "responses": responses}
    if description:
        op["description"] = description
    if queue:
        op["parameters"] = [{"$ref": "#/components/parameters/QueueName"}]
    if request:
        op["requestBody"] = {
            "required": request_required,
            "content": {"application/json": {"schema": _ref(request)}},
        }
    return op


def _paths() -> dict[str, Schema]:
    q = "/v1/queues/{name}"
    m = f"{q}/messages"
    return {
        "/v1/queues": {
            "get": _op(
                "listQueues",
                "List queues",
                {**_ok(200, "Every queue, sorted by name", "QueueList"), **_errors()},
                queue=False,
            )
        },
        q: {
            "put": _op(
                "createQueue",
                "Create a queue (idempotent)",
                {
                    **_ok(201, "Created", "CreateQueueResponse"),
                    **_ok(200, "Already existed with these attributes", "CreateQueueResponse"),
                    **_errors("Conflict"),
                },
                request="CreateQueueRequest",
                request_required=False,
                description="201 with a Location header when created; 200 when the queue "
                "already exists with identical attributes; 409 QueueAlreadyExists when it "
                "exists with different ones. Omitted attributes take their defaults.",
            ),
            "get": _op(
                "getQueue",
                "Queue attributes and statistics",
                {**_ok(200, "The queue", "Queue"), **_errors("NotFound")},
            ),
            "patch": _op(
                "setQueueAttributes",
                "Change some attributes",
                {
                    **_ok(200, "The attributes after the change", "QueueAttributesResponse"),
                    **_errors("NotFound"),
                },
                request="SetAttributesRequest",
            ),
            "delete": _op(
                "deleteQueue",
                "Delete a queue and its messages",
                {**_ok(200, "Deleted", "DeleteQueueResponse"), **_errors("NotFound")},
                request="EmptyRequest",
                request_required=False,
            ),
        },
        f"{q}/purge": {
            "post": _op(
                "purgeQueue",
                "Delete every message of a queue",
                {
                    **_ok(200, "How many messages were deleted", "PurgeResponse"),
                    **_errors("NotFound"),
                },
                request="EmptyRequest",
                request_required=False,
            )
        },
        m: {
            "post": _op(
                "sendMessages",
                "Send a batch of messages",
                {
                    **_ok(200, "Committed on a majority, in order", "SendResponse"),
                    **_errors("NotFound", "TooLarge"),
                },
                request="SendRequest",
                description="Returns only after every message is fsynced on a majority of the "
                "queue's replicas.",
            )
        },
        f"{m}/receive": {
            "post": _op(
                "receiveMessages",
                "Lease visible messages (long poll)",
                {
                    **_ok(200, "Leased messages (maybe none)", "ReceiveResponse"),
                    **_errors("NotFound"),
                },
                request="ReceiveRequest",
                request_required=False,
                description="A received message is invisible to others until its visibility "
                "timeout passes, it is acked, nacked, or its visibility is changed.",
            )
        },
        f"{m}/ack": {
            "post": _op(
                "ackMessages",
                "Delete received messages",
                {
                    **_ok(200, "Per-receipt results, after commit", "ResultsResponse"),
                    **_errors("NotFound"),
                },
                request="AckRequest",
            )
        },
        f"{m}/visibility": {
            "post": _op(
                "changeVisibility",
                "Extend or shorten leases",
                {**_ok(200, "Per-receipt results", "ResultsResponse"), **_errors("NotFound")},
                request="VisibilityRequest",
            )
        },
        f"{m}/nack": {
            "post": _op(
                "nackMessages",
                "Release leases (visible again after delay_seconds)",
                {**_ok(200, "Per-receipt results", "ResultsResponse"), **_errors("NotFound")},
                request="NackRequest",
            )
        },
        "/v1/status": {
            "get": _op(
                "clusterStatus",
                "This node's view of every Raft group (role, term, leader, commit, lag)",
                _ok(200, "Status", "ClusterStatus"),
                queue=False,
            )
        },
        "/healthz": {
            "get": _op(
                "healthz",
                "Liveness: the process answers (never depends on quorum)",
                _ok(200, "Alive", "Health"),
                queue=False,
            )
        },
        "/readyz": {
            "get": _op(
                "readyz",
                "Readiness: every group of this node has a leader",
                {**_ok(200, "Ready", "Ready"), **_ok(503, "Not ready", "Ready")},
                queue=False,
            )
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (text exposition format)",
                "responses": {
                    "200": {
                        "description": "Every collector of the node's registry",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1 document",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document (a fresh dict on every call)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cmq native API",
            "version": "1",
            "description": (
                "A Raft-replicated reliable message queue. Sends and acks return only after "
                "they are committed on a majority of fsynced replicas. Request bodies are JSON "
                'objects; unknown fields, wrong types (true/1.0/"1" where an integer is '
                "expected), out-of-range values and malformed JSON get a 4xx and change "
                f"nothing. Request bodies over {MAX_REQUEST_BYTES} bytes get 413 "
                "RequestTooLarge. Optional fields may be omitted or null (the default)."
            ),
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "parameters": {
                "QueueName": {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": QUEUE_NAME.pattern},
                }
            },
            "headers": {
                "RetryAfter": {
                    "description": "Seconds to wait before retrying.",
                    "schema": {"type": "integer", "minimum": 0},
                }
            },
            "responses": {
                name: _error_response(status, description)
                for name, (status, description) in ERROR_RESPONSES.items()
            },
        },
    }
