"""SQS messages on cmq messages. Pure.

SQS message attributes are typed (``String``, ``Number``, ``Binary``, each with an optional
``.label``); cmq's are string pairs. A ``String`` attribute is stored as itself (so the native
API sees it unchanged); any other type stores its text (binary: base64) under its name and its
type in a reserved attribute. Reserved attributes start with ``AWS.cmq.``, a prefix SQS forbids
in attribute names, so they never meet a client's:

* ``AWS.cmq.types``: JSON ``{name: data type}`` of the attributes that are not plain ``String``;
* ``AWS.cmq.sender``: the ``SenderId`` system attribute (the sender's access key id, else the
  account);
* ``AWS.cmq.trace``: the ``AWSTraceHeader`` system attribute of the send.

Message system attributes on receive: ``SentTimestamp`` (the leader's commit clock, ms),
``ApproximateReceiveCount`` (cmq's receive count), ``SenderId``, ``AWSTraceHeader`` and
``ApproximateFirstReceiveTimestamp`` (only on a first receive, where it is the receive's time:
cmq does not record the first receive of a message received again).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from api.sqs.errors import InvalidMessageContents, InvalidParameterValue
from api.sqs.md5 import AttributeValue

RESERVED = "AWS.cmq."
TYPES_KEY = RESERVED + "types"
SENDER_KEY = RESERVED + "sender"
TRACE_KEY = RESERVED + "trace"
MAX_ATTRIBUTES = 10
MAX_MESSAGE_BYTES = 1_048_576
"""The largest message SQS accepts (body and attributes), whatever the queue's setting."""

_ALL_ATTRIBUTES = frozenset({"All", ".*", "*"})
_BODY_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_\-.]{1,256}$")
_DATA_TYPE = re.compile(r"^(String|Number|Binary)(\.[\x20-\x7e]+)?$")
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
SYSTEM_ATTRIBUTES = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "AWSTraceHeader",
    "MessageGroupId",
    "MessageDeduplicationId",
    "SequenceNumber",
)


def check_body(body: object, parameter: str = "MessageBody") -> str:
    if not isinstance(body, str):
        raise InvalidParameterValue(f"The request must contain the parameter {parameter}.")
    if not body:
        raise InvalidParameterValue(f"The parameter {parameter} must not be empty.")
    bad = _BODY_INVALID.search(body)
    if bad is not None:
        raise InvalidMessageContents(
            f"Invalid characters found in {parameter}: U+{ord(bad.group()):04X} is not allowed."
        )
    return body


def parse_attributes(data: object, *, system: bool = False) -> dict[str, AttributeValue]:
    """Checked message attributes (``system``: the ``MessageSystemAttributes`` of a send)."""
    if data is None:
        return {}
    what = "message system attribute" if system else "message attribute"
    if not isinstance(data, dict):
        raise InvalidParameterValue(f"{what}s must be a map of names to values")
    if len(data) > MAX_ATTRIBUTES:
        raise InvalidParameterValue(
            f"Number of {what}s [{len(data)}] exceeds the allowed maximum [{MAX_ATTRIBUTES}]."
        )
    out: dict[str, AttributeValue] = {}
    for name, value in data.items():
        if system:
            if name != "AWSTraceHeader":
                raise InvalidParameterValue(f"Message system attribute name '{name}' is invalid.")
        else:
            _check_attribute_name(name)
        out[name] = _attribute_value(name, value, what)
    return out


def _check_attribute_name(name: str) -> None:
    lowered = name.lower()
    if (
        not _ATTRIBUTE_NAME.match(name)
        or name.startswith(".")
        or name.endswith(".")
        or ".." in name
        or lowered.startswith(("aws.", "amazon."))
    ):
        raise InvalidParameterValue(
            f"Message attribute name '{name}' is invalid: 1 to 256 of A-Z a-z 0-9 _ - ., not "
            "starting or ending with a period, no two periods in a row, and not starting with "
            "AWS. or Amazon."
        )


def _attribute_value(name: str, value: object, what: str) -> AttributeValue:
    if not isinstance(value, dict):
        raise InvalidParameterValue(f"The {what} '{name}' must have a DataType and a value.")
    data_type = value.get("DataType")
    if not isinstance(data_type, str) or not _DATA_TYPE.match(data_type) or len(data_type) > 256:
        raise InvalidParameterValue(
            f"The {what} '{name}' has an invalid type {data_type!r}: String, Number or Binary, "
            "optionally followed by .label"
        )
    if value.get("StringListValues") or value.get("BinaryListValues"):
        raise InvalidParameterValue("StringListValues and BinaryListValues are not supported.")
    base = data_type.split(".", 1)[0]
    if base == "Binary":
        raw = value.get("BinaryValue")
        if not isinstance(raw, str) or not raw:
            raise InvalidParameterValue(
                f"The {what} '{name}' must contain a non-empty value of type 'Binary'."
            )
        try:
            decoded = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidParameterValue(f"The {what} '{name}' has invalid base64.") from None
        return AttributeValue(data_type, binary_value=decoded)
    text = value.get("StringValue")
    if not isinstance(text, str) or not text:
        raise InvalidParameterValue(
            f"The {what} '{name}' must contain a non-empty value of type '{base}'."
        )
    if base == "Number" and not _NUMBER.match(text):
        raise InvalidParameterValue(f"Can't cast the value of {what} '{name}' to a number.")
    check_body(text, f"the {what} '{name}'")
    return AttributeValue(data_type, string_value=text)


def message_size(body: str, attributes: Mapping[str, AttributeValue]) -> int:
    """A message's size as SQS counts it: body, names, types and values, in bytes."""
    size = len(body.encode("utf-8"))
    for name, v in attributes.items():
        size += len(name.encode()) + len(v.data_type.encode())
        size += len(v.binary_value or b"") + len((v.string_value or "").encode("utf-8"))
    return size


def encode_attributes(
    attributes: Mapping[str, AttributeValue], sender: str, trace: str | None
) -> tuple[tuple[str, str], ...]:
    """``attributes`` and the system attributes as cmq message attributes."""
    pairs: list[tuple[str, str]] = []
    types: dict[str, str] = {}
    for name, v in attributes.items():
        if v.binary_value is not None:
            pairs.append((name, base64.b64encode(v.binary_value).decode("ascii")))
        else:
            pairs.append((name, v.string_value or ""))
        if v.data_type != "String":
            types[name] = v.data_type
    if types:
        pairs.append((TYPES_KEY, orjson.dumps(types).decode()))
    pairs.append((SENDER_KEY, sender))
    if trace is not None:
        pairs.append((TRACE_KEY, trace))
    return tuple(pairs)


def decode_attributes(
    pairs: Iterable[tuple[str, str]],
) -> tuple[dict[str, AttributeValue], dict[str, str]]:
    """A stored message's SQS attributes and its reserved ones (``AWS.cmq.*``)."""
    stored = dict(pairs)
    reserved = {k: v for k, v in stored.items() if k.startswith(RESERVED)}
    types: dict[str, Any] = {}
    if TYPES_KEY in reserved:
        try:
            loaded = orjson.loads(reserved[TYPES_KEY])
            types = loaded if isinstance(loaded, dict) else {}
        except orjson.JSONDecodeError:
            types = {}
    out: dict[str, AttributeValue] = {}
    for name, text in stored.items():
        if name.startswith(RESERVED):
            continue
        data_type = types.get(name)
        data_type = data_type if isinstance(data_type, str) else "String"
        if data_type.split(".", 1)[0] == "Binary":
            try:
                out[name] = AttributeValue(data_type, binary_value=base64.b64decode(text))
                continue
            except (binascii.Error, ValueError):
                data_type = "String"
        out[name] = AttributeValue(data_type, string_value=text)
    return out, reserved


def select_attributes(
    attributes: Mapping[str, AttributeValue], names: object
) -> dict[str, AttributeValue]:
    """The attributes ReceiveMessage's ``MessageAttributeNames`` ask for, resolved as SQS
    resolves them: ``All``, ``.*`` and ``*`` ask for every attribute; ``prefix.*`` for those
    whose name starts with ``prefix.``; any other name for that attribute (names are
    case-sensitive; a name the message lacks is ignored)."""
    if names is None:
        return {}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidParameterValue("MessageAttributeNames must be a list of names")
    if not _ALL_ATTRIBUTES.isdisjoint(names):
        return dict(attributes)
    prefixes = tuple(n[:-1] for n in names if n.endswith(".*"))
    exact = set(names)
    return {
        k: v for k, v in attributes.items() if k in exact or (prefixes and k.startswith(prefixes))
    }


def render_attribute(value: AttributeValue) -> dict[str, str]:
    """One message attribute as SQS answers it (binary values in base64)."""
    if value.binary_value is not None:
        return {
            "BinaryValue": base64.b64encode(value.binary_value).decode("ascii"),
            "DataType": value.data_type,
        }
    return {"StringValue": value.string_value or "", "DataType": value.data_type}


def system_names(*lists: object) -> set[str]:
    """The system attributes ReceiveMessage asks for (``AttributeNames`` and
    ``MessageSystemAttributeNames``; ``All`` expands; names cmq has no value for are ignored)."""
    out: set[str] = set()
    for names in lists:
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidParameterValue("AttributeNames must be a list of names")
        for n in names:
            if n == "All":
                out.update(SYSTEM_ATTRIBUTES)
            elif n in SYSTEM_ATTRIBUTES:
                out.add(n)
    return out
