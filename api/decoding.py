"""Request bodies decoded into the typed models of `api.models`, and refusals worded for people.
Pure: no aiohttp, no I/O.

`decode` lets msgspec decode and validate a body in one pass against the model's types. When
msgspec refuses it, the refusal is explained: the body is read as plain JSON (malformed JSON or a
non-object is `InvalidJson`, as orjson judges it) and walked against the same model (through
`msgspec.inspect`, so no rule is restated here) to find the first offending field, which becomes
an `InvalidParameter` (or subclass) naming it: ``messages[1].delay_seconds must be in [0, 900];
got 901``. The error codes follow the model's types:

* a list shorter than its ``min_length`` is `EmptyBatch`, longer than its ``max_length`` is
  `TooManyEntries`; an integer whose `Meta.extra` has `api.models.TOO_MANY` is `TooManyEntries`
  above its maximum;
* queue attributes are worded by `cmq.model.QueueAttributes.check_changes`, the queue's own
  checker (so a bad ``dead_letter_queue`` is `InvalidQueueName`);
* everything else is `InvalidParameter`.

Within an object the explanation reports, in this order: an unknown field, a missing (or null)
required field, the first bad field in declaration order, then a rule across fields (the
model's ``__post_init__``). If the walk finds nothing (a rule it does not know), the refusal is
an `InvalidParameter` with msgspec's own message; a test keeps that from happening for the
bad-input table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import orjson
from msgspec import inspect as mi

from api.errors import EmptyBatch, InvalidJson
from api.models import HINT, TOO_MANY, QueueAttributesInput
from cmq.errors import CmqError, InvalidParameter, TooManyEntries
from cmq.model import QueueAttributes

T = TypeVar("T")

MODEL_CHECKS: dict[type, Callable[[object], object]] = {
    QueueAttributesInput: QueueAttributes.check_changes,
}
"""Structs whose errors are worded by the queue's own checker of the same values."""


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
"""One decoder per model, made on first use (a handful of models: bounded)."""


def _decoder(model: type[T]) -> msgspec.json.Decoder[T]:
    decoder = _decoders.get(model)
    if decoder is None:
        decoder = _decoders[model] = msgspec.json.Decoder(model, strict=True)
    return decoder


def decode(raw: bytes, model: type[T]) -> T:
    """``raw`` (a request body; empty or whitespace-only counts as ``{}``) as a ``model``, or
    the `InvalidParameter` (subclass) that says what is wrong with it."""
    if not raw.strip():
        raw = b"{}"
    try:
        return _decoder(model).decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # ValidationError is a DecodeError
        failure: Exception = e
    data = parse_object(raw)
    raise explain(data, model) or InvalidParameter(str(failure))


def parse_object(raw: bytes) -> dict[str, Any]:
    """``raw`` as a JSON object, or `InvalidJson`."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidJson(f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise InvalidJson(f"request body must be a JSON object, not {json_type(data)}")
    return data


def explain(data: dict[str, Any], model: type) -> CmqError | None:
    """The first reason ``data`` (a JSON object) is not a valid ``model``; None if none is
    found (then the caller falls back to msgspec's own message)."""
    return _explain(data, mi.type_info(model), "", field=False)


def _child(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _explain(value: object, t: mi.Type, where: str, *, field: bool) -> CmqError | None:
    extra: dict[str, Any] = {}
    while isinstance(t, mi.Metadata | mi.UnionType):
        if isinstance(t, mi.Metadata):
            extra |= t.extra or {}
            t = t.type
            continue
        options = [o for o in t.types if not isinstance(o, mi.NoneType)]
        if value is None and len(options) < len(t.types):
            return None
        if len(options) != 1:
            return None  # no such union in the models
        t = options[0]
    if value is None and field:
        return InvalidParameter(f"{where} is required")
    if isinstance(t, mi.IntType):
        return _explain_int(value, t, where, extra)
    if isinstance(t, mi.StrType):
        return _explain_str(value, t, where, extra)
    if isinstance(t, mi.BytesType):
        if not isinstance(value, str):
            return InvalidParameter(f"{where} must be a string, not {json_type(value)}")
        try:
            msgspec.convert(value, bytes, strict=True)
        except msgspec.ValidationError:
            return InvalidParameter(f"{where} is not valid standard (padded) base64")
        return None
    if isinstance(t, mi.ListType):
        return _explain_list(value, t, where)
    if isinstance(t, mi.DictType):
        return _explain_dict(value, t, where)
    if isinstance(t, mi.StructType):
        return _explain_struct(value, t, where)
    return None


def _explain_int(
    value: object, t: mi.IntType, where: str, extra: dict[str, Any]
) -> CmqError | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return InvalidParameter(f"{where} must be an integer, not {json_type(value)}")
    lo, hi = t.ge, t.le
    if extra.get(TOO_MANY) and hi is not None and value > hi:
        return TooManyEntries(f"{where} must be at most {hi}; got {value}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"<= {hi}" if lo is None else f"[{lo}, {hi}]"
        return InvalidParameter(f"{where} must be in {bounds}; got {value}")
    return None


def _explain_str(
    value: object, t: mi.StrType, where: str, extra: dict[str, Any]
) -> CmqError | None:
    lo, hi = t.min_length or 0, t.max_length
    if isinstance(value, str) and lo <= len(value) and (hi is None or len(value) <= hi):
        if t.pattern is not None and not re.search(t.pattern, value):
            return InvalidParameter(f"{where} must match {t.pattern}; got {value[:80]!r}")
        return None
    if hi is not None:
        return InvalidParameter(f"{where} must be a string of {lo}..{hi} characters")
    if lo == 1:
        return InvalidParameter(f"{where} must be a non-empty string")
    hint = f"; {extra[HINT]}" if HINT in extra else ""
    return InvalidParameter(f"{where} must be a string, not {json_type(value)}{hint}")


def _explain_list(value: object, t: mi.ListType, where: str) -> CmqError | None:
    if not isinstance(value, list):
        return InvalidParameter(f"{where} must be an array, not {json_type(value)}")
    if t.min_length and len(value) < t.min_length:
        return EmptyBatch(f"{where} must have at least one entry")
    if t.max_length is not None and len(value) > t.max_length:
        return TooManyEntries(
            f"{where} has {len(value)} entries; at most {t.max_length} are allowed"
        )
    for i, item in enumerate(value):
        if error := _explain(item, t.item_type, f"{where}[{i}]", field=False):
            return error
    return None


def _explain_dict(value: object, t: mi.DictType, where: str) -> CmqError | None:
    if not isinstance(value, dict):
        return InvalidParameter(f"{where} must be an object, not {json_type(value)}")
    if t.max_length is not None and len(value) > t.max_length:
        return InvalidParameter(
            f"{where} has {len(value)} entries; at most {t.max_length} are allowed"
        )
    key_type = t.key_type
    for key, item in value.items():
        if isinstance(key_type, mi.StrType) and _explain_str(key, key_type, "", {}):
            lo, hi = key_type.min_length or 0, key_type.max_length
            return InvalidParameter(f"{where} names must be {lo}..{hi} characters")
        if error := _explain(item, t.value_type, f"{where}.{key}", field=False):
            return error
    return None


def _explain_struct(value: object, t: mi.StructType, where: str) -> CmqError | None:
    check = MODEL_CHECKS.get(t.cls)
    if check is not None:
        try:
            check(value)
        except CmqError as e:
            return e
    if not isinstance(value, dict):
        return InvalidParameter(f"{where} must be an object, not {json_type(value)}")
    names = {f.encode_name for f in t.fields}
    for key in value:
        if key not in names:
            prefix = f"{where}: " if where else ""
            return InvalidParameter(f"{prefix}unknown field {key!r}")
    for f in t.fields:
        if f.required and value.get(f.encode_name) is None:
            return InvalidParameter(f"{_child(where, f.encode_name)} is required")
    for f in t.fields:
        if f.encode_name in value:
            child = _child(where, f.encode_name)
            if error := _explain(value[f.encode_name], f.type, child, field=True):
                return error
    try:  # the fields are fine: what is left are the rules across them (``__post_init__``)
        msgspec.convert(value, t.cls, strict=True)
    except msgspec.ValidationError as e:
        if " - at `" in str(e):
            return None  # a field rule this walk does not know: let the caller fall back
        return InvalidParameter(f"{where} {e}" if where else str(e))
    return None


_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (type(None), "null"),
    (bool, "a boolean"),  # before int: a bool is an int
    (int, "an integer"),
    (float, "a number with a fraction or exponent"),
    (str, "a string"),
    (list, "an array"),
    (dict, "an object"),
)
"""Python's type of a decoded JSON value -> its name in messages, the first that matches."""


def json_type(value: object) -> str:
    """How a JSON value's type is named in messages (``a string``, ``null``)."""
    return next((name for t, name in _JSON_TYPES if isinstance(value, t)), type(value).__name__)
