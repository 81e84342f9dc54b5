"""Request parsing and response rendering for the native JSON API. Pure: no aiohttp, no I/O.

Parsing turns a request body (bytes) into the `cmq.model` values the `QueueService` takes, or
raises an `InvalidParameter` (or a subclass) naming the offending field, so a bad request never
reaches the service. The rules, applied to every request object:

* the body is a JSON object (an empty body counts as ``{}`` where every field is optional);
* unknown fields are rejected;
* integers are JSON integers: ``true``, ``1.0`` and ``"1"`` are rejected;
* an optional field may be omitted or ``null``; both mean "the default";
* batches are non-empty arrays within their limit (`EmptyBatch`, `TooManyEntries`).

Rendering turns service results into JSON-ready dicts (orjson does the bytes).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from api.errors import EmptyBatch, InvalidJson
from cmq.errors import InvalidParameter, TooManyEntries
from cmq.model import (
    LIMITS,
    MAX_ACK_BATCH,
    MAX_ATTRIBUTE_NAME,
    MAX_DEDUP_ID,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
    MAX_WAIT_SECONDS,
    EntryResult,
    OutgoingMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SentMessage,
    check_queue_name,
)

MAX_REQUEST_BYTES = 12 * 1024 * 1024
"""Largest request body accepted (413 ``RequestTooLarge`` above): a full send batch of large
messages, base64-inflated, fits; per-message limits are the queue's ``max_message_size``."""

VISIBILITY_RANGE = LIMITS["visibility_timeout"][:2]
DELAY_RANGE = LIMITS["delay_seconds"][:2]
WAIT_RANGE = (0, MAX_WAIT_SECONDS)
MAX_VISIBILITY_BATCH = MAX_ACK_BATCH
MAX_NACK_BATCH = MAX_ACK_BATCH

JsonObject = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Requests


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    max_messages: int = 1
    visibility_timeout: int | None = None
    """None: the queue's ``visibility_timeout``."""
    wait_seconds: int | None = None
    """None: the queue's ``receive_wait_seconds``."""


@dataclass(frozen=True, slots=True)
class NackRequest:
    receipts: list[str]
    delay_seconds: int = 0


def parse_body(raw: bytes) -> JsonObject | None:
    """The request body as a JSON object; None when the body is empty (or only whitespace)."""
    if not raw.strip():
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidJson(f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise InvalidJson(f"request body must be a JSON object, not {_json_type(data)}")
    return data


def parse_queue_name(name: str) -> str:
    """The queue name from the path, or `InvalidQueueName`."""
    return check_queue_name(name)


def parse_no_fields(body: JsonObject | None) -> None:
    """For requests that take no fields (delete, purge): the body is absent or ``{}``."""
    _fields(body, "request", frozenset())


def parse_create(body: JsonObject | None) -> QueueAttributes:
    """``PUT /v1/queues/{name}``: ``{"attributes"?: {...}}``; absent means the defaults."""
    obj = _fields(body, "request", frozenset({"attributes"}))
    return QueueAttributes.from_dict(obj.get("attributes"))


def parse_set_attributes(body: JsonObject | None) -> dict[str, Any]:
    """``PATCH /v1/queues/{name}``: ``{"attributes": {...}}`` with at least one attribute.
    Each attribute is checked on its own here; the service checks the merged result."""
    obj = _fields(body, "request", frozenset({"attributes"}), required=("attributes",))
    changes = QueueAttributes.check_changes(obj["attributes"])
    if not changes:
        raise InvalidParameter("attributes must name at least one attribute to change")
    return changes


def parse_send(body: JsonObject | None) -> list[OutgoingMessage]:
    """``POST .../messages``: ``{"messages": [...]}``, 1..`MAX_SEND_BATCH` entries."""
    obj = _fields(body, "request", frozenset({"messages"}), required=("messages",))
    entries = _batch(obj["messages"], "messages", MAX_SEND_BATCH)
    return [_message(entry, f"messages[{i}]") for i, entry in enumerate(entries)]


def parse_receive(body: JsonObject | None) -> ReceiveRequest:
    """``POST .../messages/receive``: every field optional (an empty body receives one)."""
    allowed = frozenset({"max_messages", "visibility_timeout", "wait_seconds"})
    obj = _fields(body, "request", allowed)
    max_messages = _opt_int(obj, "max_messages", "max_messages", 1, None)
    if max_messages is None:
        max_messages = 1
    elif max_messages > MAX_RECEIVE_BATCH:
        raise TooManyEntries(
            f"max_messages must be at most {MAX_RECEIVE_BATCH}; got {max_messages}"
        )
    return ReceiveRequest(
        max_messages=max_messages,
        visibility_timeout=_opt_int(
            obj, "visibility_timeout", "visibility_timeout", *VISIBILITY_RANGE
        ),
        wait_seconds=_opt_int(obj, "wait_seconds", "wait_seconds", *WAIT_RANGE),
    )


def parse_ack(body: JsonObject | None) -> list[str]:
    """``POST .../messages/ack``: ``{"receipts": [...]}``, 1..`MAX_ACK_BATCH` receipts."""
    obj = _fields(body, "request", frozenset({"receipts"}), required=("receipts",))
    return _receipts(obj["receipts"], MAX_ACK_BATCH)


def parse_visibility(body: JsonObject | None) -> list[tuple[str, int]]:
    """``POST .../messages/visibility``: ``{"entries": [{"receipt", "visibility_timeout"}]}``."""
    obj = _fields(body, "request", frozenset({"entries"}), required=("entries",))
    entries = _batch(obj["entries"], "entries", MAX_VISIBILITY_BATCH)
    out: list[tuple[str, int]] = []
    for i, raw in enumerate(entries):
        where = f"entries[{i}]"
        entry = _fields(
            _object(raw, where),
            where,
            frozenset({"receipt", "visibility_timeout"}),
            required=("receipt", "visibility_timeout"),
        )
        receipt = _receipt(entry["receipt"], f"{where}.receipt")
        seconds = _opt_int(
            entry, "visibility_timeout", f"{where}.visibility_timeout", *VISIBILITY_RANGE
        )
        if seconds is None:
            raise InvalidParameter(f"{where}.visibility_timeout must be an integer")
        out.append((receipt, seconds))
    return out


def parse_nack(body: JsonObject | None) -> NackRequest:
    """``POST .../messages/nack``: ``{"receipts": [...], "delay_seconds"?: 0..900}``."""
    allowed = frozenset({"receipts", "delay_seconds"})
    obj = _fields(body, "request", allowed, required=("receipts",))
    receipts = _receipts(obj["receipts"], MAX_NACK_BATCH)
    delay = _opt_int(obj, "delay_seconds", "delay_seconds", *DELAY_RANGE)
    return NackRequest(receipts=receipts, delay_seconds=0 if delay is None else delay)


def _message(raw: object, where: str) -> OutgoingMessage:
    allowed = frozenset({"body", "body_base64", "delay_seconds", "attributes", "dedup_id"})
    obj = _fields(_object(raw, where), where, allowed)
    has_text = obj.get("body") is not None
    has_binary = obj.get("body_base64") is not None
    if has_text == has_binary:
        raise InvalidParameter(f"{where} needs exactly one of body and body_base64")
    binary = has_binary
    if binary:
        body = _base64(obj["body_base64"], f"{where}.body_base64")
    else:
        text = obj["body"]
        if not isinstance(text, str):
            raise InvalidParameter(f"{where}.body must be a string; use body_base64 for binary")
        body = text.encode("utf-8")  # orjson only yields valid UTF-8 strings
    dedup_id = obj.get("dedup_id")
    if dedup_id is not None and (
        not isinstance(dedup_id, str) or not 1 <= len(dedup_id) <= MAX_DEDUP_ID
    ):
        raise InvalidParameter(f"{where}.dedup_id must be a string of 1..{MAX_DEDUP_ID} characters")
    return OutgoingMessage(
        body=body,
        binary=binary,
        delay_seconds=_opt_int(obj, "delay_seconds", f"{where}.delay_seconds", *DELAY_RANGE),
        attributes=_message_attributes(obj.get("attributes"), f"{where}.attributes"),
        dedup_id=dedup_id,
    )


def _message_attributes(raw: object, where: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    obj = _object(raw, where)
    if len(obj) > MAX_MESSAGE_ATTRIBUTES:
        raise InvalidParameter(
            f"{where} has {len(obj)} entries; at most {MAX_MESSAGE_ATTRIBUTES} are allowed"
        )
    for key, value in obj.items():
        if not 1 <= len(key) <= MAX_ATTRIBUTE_NAME:
            raise InvalidParameter(f"{where} names must be 1..{MAX_ATTRIBUTE_NAME} characters")
        if not isinstance(value, str):
            raise InvalidParameter(f"{where}.{key} must be a string, not {_json_type(value)}")
    return tuple(obj.items())


def _base64(raw: object, where: str) -> bytes:
    if not isinstance(raw, str):
        raise InvalidParameter(f"{where} must be a string")
    try:
        return base64.b64decode(raw.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise InvalidParameter(f"{where} is not valid standard (padded) base64") from None


def _receipts(raw: object, limit: int) -> list[str]:
    entries = _batch(raw, "receipts", limit)
    return [_receipt(r, f"receipts[{i}]") for i, r in enumerate(entries)]


def _receipt(raw: object, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise InvalidParameter(f"{where} must be a non-empty string")
    return raw


def _batch(raw: object, where: str, limit: int) -> list[Any]:
    if not isinstance(raw, list):
        raise InvalidParameter(f"{where} must be an array, not {_json_type(raw)}")
    if not raw:
        raise EmptyBatch(f"{where} must have at least one entry")
    if len(raw) > limit:
        raise TooManyEntries(f"{where} has {len(raw)} entries; at most {limit} are allowed")
    return raw


def _object(raw: object, where: str) -> JsonObject:
    if not isinstance(raw, dict):
        raise InvalidParameter(f"{where} must be an object, not {_json_type(raw)}")
    return raw


def _fields(
    obj: JsonObject | None,
    where: str,
    allowed: frozenset[str],
    required: Sequence[str] = (),
) -> JsonObject:
    """``obj`` (None counts as ``{}``) if it has only ``allowed`` fields and every ``required``
    one is present and not null."""
    obj = {} if obj is None else obj
    for key in obj:
        if key not in allowed:
            prefix = "" if where == "request" else f"{where}: "
            raise InvalidParameter(f"{prefix}unknown field {key!r}")
    for key in required:
        if obj.get(key) is None:
            name = key if where == "request" else f"{where}.{key}"
            raise InvalidParameter(f"{name} is required")
    return obj


def _opt_int(obj: JsonObject, key: str, where: str, lo: int, hi: int | None) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameter(f"{where} must be an integer, not {_json_type(value)}")
    if value < lo or (hi is not None and value > hi):
        bounds = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise InvalidParameter(f"{where} must be in {bounds}; got {value}")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# Responses


def render_created(name: str, attributes: QueueAttributes, created: bool) -> JsonObject:
    return {"name": name, "created": created, "attributes": attributes.to_dict()}


def render_queue_list(names: Sequence[str]) -> JsonObject:
    return {"queues": [{"name": name} for name in names]}


def render_queue(name: str, attributes: QueueAttributes, stats: QueueStats) -> JsonObject:
    return {"name": name, "attributes": attributes.to_dict(), "stats": asdict(stats)}


def render_attributes(name: str, attributes: QueueAttributes) -> JsonObject:
    return {"name": name, "attributes": attributes.to_dict()}


def render_deleted(name: str) -> JsonObject:
    return {"name": name, "deleted": True}


def render_purged(count: int) -> JsonObject:
    return {"purged": count}


def render_sent(sent: Sequence[SentMessage]) -> JsonObject:
    return {"messages": [{"id": m.id, "seq": m.seq} for m in sent]}


def render_received(messages: Sequence[ReceivedMessage]) -> JsonObject:
    return {"messages": [_received(m) for m in messages]}


def _received(m: ReceivedMessage) -> JsonObject:
    out: JsonObject = {"id": m.id, "seq": m.seq}
    text: str | None = None
    if not m.binary:
        try:
            text = m.body.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # cannot be sent as a string: fall back to base64 rather than fail
    if text is None:
        out["body_base64"] = base64.b64encode(m.body).decode("ascii")
    else:
        out["body"] = text
    out["receipt"] = m.receipt
    out["receive_count"] = m.receive_count
    out["sent_at"] = m.sent_at_ms
    out["attributes"] = dict(m.attributes)
    return out


def render_results(results: Sequence[EntryResult]) -> JsonObject:
    out: list[JsonObject] = []
    for r in results:
        item: JsonObject = {"receipt": r.receipt, "ok": r.ok}
        if r.error is not None:
            item["error"] = r.error
        out.append(item)
    return {"results": out}


def render_json(data: JsonObject) -> bytes:
    return orjson.dumps(data)
