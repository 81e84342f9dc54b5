"""The two wire protocols of SQS, parsed into one parameter shape and rendered back. Pure.

* **JSON** (``POST /``, ``X-Amz-Target: AmazonSQS.<Op>``, ``application/x-amz-json-1.0``): the
  body is the operation's input as a JSON object; answers are JSON; errors are
  ``{"__type": "com.amazonaws.sqs#<Shape>", "message": ...}`` with the query protocol's code in
  the ``x-amzn-query-error`` header (``<code>;Sender``), which botocore reports as the error code.
* **Query** (form-encoded ``Action=<Op>&...``, in the body of a POST or the query string, at
  ``/`` or at a queue URL): lists and maps are flattened with 1-based indices
  (``Attribute.1.Name``, ``MessageAttribute.1.Value.StringValue``,
  ``SendMessageBatchRequestEntry.2.Id``); `query_params` turns them into the JSON protocol's
  shape (``Attributes: {...}``, ``Entries: [...]``), integers included, so one service serves
  both. Answers are ``<OpResponse><OpResult>...</OpResult><ResponseMetadata>`` XML with the same
  flattening; errors are ``<ErrorResponse>`` documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

import orjson

from api.sqs.errors import MalformedQueryString, SerializationError, SqsError

JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
XML_CONTENT_TYPE = "text/xml"
TARGET_PREFIX = "AmazonSQS."
XML_NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"

# Query protocol: flattened list member name -> JSON member
_LISTS = {
    "AttributeName": "AttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "TagKey": "TagKeys",
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
}
# Query protocol: flattened map name -> (JSON member, key element, value element)
_MAPS = {
    "Attribute": ("Attributes", "Name", "Value"),
    "MessageAttribute": ("MessageAttributes", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value"),
    "Tag": ("Tags", "Key", "Value"),
    "Tags": ("Tags", "Key", "Value"),
}
_EMPTY: dict[str, type[list[Any]] | type[dict[str, Any]]] = {
    **dict.fromkeys(_LISTS.values(), list),
    **{member: dict for member, _, _ in _MAPS.values()},
}
_INTEGERS = frozenset(
    {
        "DelaySeconds",
        "MaxNumberOfMessages",
        "VisibilityTimeout",
        "WaitTimeSeconds",
        "MaxResults",
        "MaxNumberOfMessagesPerSecond",
    }
)
_MAX_INDEX = 1000

# XML rendering: JSON member -> element of each flattened item
_XML_LISTS = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
}
_XML_MAPS = {
    "Attributes": ("Attribute", "Name"),
    "Tags": ("Tag", "Key"),
    "MessageAttributes": ("MessageAttribute", "Name"),
}


@dataclass(frozen=True, slots=True)
class SqsRequest:
    """One parsed request: its protocol, operation and parameters (JSON shape)."""

    json: bool
    operation: str
    params: dict[str, Any]


def json_params(body: bytes) -> dict[str, Any]:
    """The JSON protocol's input object (an empty body is ``{}``)."""
    if not body.strip():
        return {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise SerializationError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise SerializationError("the request body must be a JSON object")
    return data


def query_params(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Flattened query parameters (``Action`` and ``Version`` included) in the JSON shape."""
    tree: dict[str, Any] = {}
    for key, value in pairs:
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise MalformedQueryString(f"parameter {key!r} conflicts with another")
            node = child
        if parts[-1] in node:
            raise MalformedQueryString(f"parameter {key!r} is given twice or conflicts")
        node[parts[-1]] = value
    return _convert(tree, "")


def _indexed(node: object, path: str) -> list[Any]:
    """The items of a flattened list, by their 1-based indices (an empty value: none)."""
    if node == "":
        return []
    if not isinstance(node, dict):
        raise MalformedQueryString(f"{path} needs an index ({path}.1, {path}.2, ...)")
    items: dict[int, Any] = {}
    for index, item in node.items():
        if not (index.isascii() and index.isdigit()) or not 1 <= int(index) <= _MAX_INDEX:
            raise MalformedQueryString(f"{path}.{index}: the index must be 1..{_MAX_INDEX}")
        if int(index) in items:  # "1" and "01"
            raise MalformedQueryString(f"{path}.{int(index)} is given twice")
        items[int(index)] = item
    return [items[i] for i in sorted(items)]


def _convert(tree: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, node in tree.items():
        path = prefix + key
        if key in _LISTS:
            out[_LISTS[key]] = [
                item if isinstance(item, str) else _convert(item, f"{path}.N.")
                for item in _indexed(node, path)
            ]
        elif key in _MAPS:
            member, key_name, value_name = _MAPS[key]
            entries: dict[str, Any] = {}
            for entry in _indexed(node, path):
                if not isinstance(entry, dict) or key_name not in entry:
                    raise MalformedQueryString(f"each {path}.N needs a {key_name}")
                name, value = entry[key_name], entry.get(value_name)
                if not isinstance(name, str):
                    raise MalformedQueryString(f"{path}.N.{key_name} must be a value")
                entries[name] = (
                    value
                    if isinstance(value, str) or value is None
                    else (_convert(value, f"{path}.N.{value_name}."))
                )
            out[member] = entries
        elif node == "" and key in _EMPTY:  # an empty list or map, under its own member name
            out[key] = _EMPTY[key]()
        elif isinstance(node, str):
            out[key] = int(node) if key in _INTEGERS and _is_int(node) else node
        else:
            out[key] = _convert(node, path + ".")
    return out


def _is_int(text: str) -> bool:
    body = text[1:] if text[:1] == "-" else text
    return body.isascii() and body.isdigit() and len(body) <= 18


# -- rendering ---------------------------------------------------------------------------------
def render_json(result: Mapping[str, Any] | None) -> bytes:
    return orjson.dumps(result or {})


def render_json_error(error: SqsError) -> tuple[bytes, dict[str, str]]:
    """The body and extra headers of ``error`` in the JSON protocol."""
    body = orjson.dumps({"__type": f"com.amazonaws.sqs#{error.shape}", "message": error.message})
    fault = "Sender" if error.sender_fault else "Receiver"
    return body, {"x-amzn-query-error": f"{error.code};{fault}"}


def render_xml(operation: str, result: Mapping[str, Any] | None, request_id: str) -> bytes:
    """The query protocol's answer to ``operation``: ``result`` (None: the operation answers
    nothing but its metadata)."""
    parts = [f'<?xml version="1.0"?><{operation}Response xmlns="{XML_NAMESPACE}">']
    if result is not None:
        parts.append(f"<{operation}Result>")
        _xml_members(result, parts, operation)
        parts.append(f"</{operation}Result>")
    parts.append(f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>")
    parts.append(f"</{operation}Response>")
    return "".join(parts).encode("utf-8")


def render_xml_error(error: SqsError, request_id: str) -> bytes:
    fault = "Sender" if error.sender_fault else "Receiver"
    return (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{XML_NAMESPACE}"><Error><Type>{fault}</Type>'
        f"<Code>{_text(error.code)}</Code><Message>{_text(error.message)}</Message><Detail/>"
        f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()


_ENTITIES = {"\r": "&#xD;", '"': "&quot;"}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    # A literal CR would be read back as LF by an XML parser: escape it.
    return escape(str(value), _ENTITIES)


def _xml_members(data: Mapping[str, Any], parts: list[str], operation: str) -> None:
    for key, value in data.items():
        if value is None:
            continue
        if key in _XML_MAPS and isinstance(value, Mapping):
            element, key_name = _XML_MAPS[key]
            for name, item in value.items():
                parts.append(f"<{element}><{key_name}>{_text(name)}</{key_name}><Value>")
                _xml_content(item, parts, operation)
                parts.append(f"</Value></{element}>")
        elif isinstance(value, list):
            element = _XML_LISTS.get(key) or f"{operation}ResultEntry"
            for item in value:
                parts.append(f"<{element}>")
                _xml_content(item, parts, operation)
                parts.append(f"</{element}>")
        else:
            parts.append(f"<{key}>")
            _xml_content(value, parts, operation)
            parts.append(f"</{key}>")


def _xml_content(value: Any, parts: list[str], operation: str) -> None:
    """What stands between an element's tags: a mapping's members, else the value as text."""
    if isinstance(value, Mapping):
        _xml_members(value, parts, operation)
    else:
        parts.append(_text(value))
