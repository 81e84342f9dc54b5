"""boto3 against cmq's SQS surface: clients for the JSON protocol (botocore's default) and for
the query protocol, and an independent check of the checksums SQS answers with.

botocore ships SQS's service model for the JSON protocol only. `query_model_dir` writes a copy
of that model switched to the query protocol: the metadata says ``query`` (with its XML
namespace), each operation's output gets its ``<Op>Result`` wrapper, and the members get the
query protocol's flattened names (``Attribute.N.Name``, ``MessageAttribute.N.Value.*``,
``SendMessageBatchRequestEntry.N``, ``Tag.N.Key``, ...). These names are the query protocol's
own, as SQS's query-protocol model published them; a client loading the copy serializes query
requests and parses XML answers with botocore's own query serializer and parser.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.api.recording import RecordingService

ACCOUNT = "000000000000"
REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "AKIDCMQTEST", "aws_secret_access_key": "secret"}

# shape -> member -> query name (the member's locationName)
_MEMBER_NAMES = {
    "CreateQueueRequest": {"Attributes": "Attribute", "tags": "Tag"},
    "SetQueueAttributesRequest": {"Attributes": "Attribute"},
    "GetQueueAttributesResult": {"Attributes": "Attribute"},
    "ListQueueTagsResult": {"Tags": "Tag"},
    "TagQueueRequest": {"Tags": "Tag"},
    "Message": {"Attributes": "Attribute", "MessageAttributes": "MessageAttribute"},
    "SendMessageRequest": {
        "MessageAttributes": "MessageAttribute",
        "MessageSystemAttributes": "MessageSystemAttribute",
    },
    "SendMessageBatchRequestEntry": {
        "MessageAttributes": "MessageAttribute",
        "MessageSystemAttributes": "MessageSystemAttribute",
    },
}
# list shape -> item name
_LIST_ITEMS = {
    "AttributeNameList": "AttributeName",
    "MessageSystemAttributeList": "AttributeName",
    "MessageAttributeNameList": "MessageAttributeName",
    "TagKeyList": "TagKey",
    "QueueUrlList": "QueueUrl",
    "MessageList": "Message",
    "BatchResultErrorEntryList": "BatchResultErrorEntry",
    "ListMessageMoveTasksResultEntryList": "ListMessageMoveTasksResultEntry",
    "SendMessageBatchRequestEntryList": "SendMessageBatchRequestEntry",
    "SendMessageBatchResultEntryList": "SendMessageBatchResultEntry",
    "DeleteMessageBatchRequestEntryList": "DeleteMessageBatchRequestEntry",
    "DeleteMessageBatchResultEntryList": "DeleteMessageBatchResultEntry",
    "ChangeMessageVisibilityBatchRequestEntryList": "ChangeMessageVisibilityBatchRequestEntry",
    "ChangeMessageVisibilityBatchResultEntryList": "ChangeMessageVisibilityBatchResultEntry",
}
# map shape -> (key name, value name)
_MAP_ENTRIES = {
    "QueueAttributeMap": ("Name", "Value"),
    "MessageSystemAttributeMap": ("Name", "Value"),
    "MessageBodyAttributeMap": ("Name", "Value"),
    "MessageBodySystemAttributeMap": ("Name", "Value"),
    "TagMap": ("Key", "Value"),
}


def _json_model() -> dict[str, Any]:
    loader = botocore.session.get_session().get_component("data_loader")
    path = Path(loader.search_paths[-1])  # botocore's own data directory
    for candidate in sorted(path.glob("sqs/*/service-2.json*")):
        opener = gzip.open if candidate.suffix == ".gz" else open
        with opener(candidate, "rt") as f:
            model: dict[str, Any] = json.load(f)
        return model
    raise AssertionError(f"no SQS model under {path}")


def query_model_dir(root: Path) -> Path:
    """A botocore data directory whose SQS model speaks the query protocol (see the module
    docstring)."""
    model = _json_model()
    meta = model["metadata"]
    for key in ("awsQueryCompatible", "jsonVersion", "targetPrefix"):
        meta.pop(key, None)
    meta["protocol"] = "query"
    meta["protocols"] = ["query"]
    meta["xmlNamespace"] = "http://queue.amazonaws.com/doc/2012-11-05/"
    for name, op in model["operations"].items():
        if "output" in op:
            op["output"]["resultWrapper"] = f"{name}Result"
    shapes = model["shapes"]
    for shape, members in _MEMBER_NAMES.items():
        for member, location in members.items():
            shapes[shape]["members"][member]["locationName"] = location
    for shape, item in _LIST_ITEMS.items():
        shapes[shape]["member"]["locationName"] = item
        shapes[shape]["flattened"] = True
    for shape, (key, value) in _MAP_ENTRIES.items():
        shapes[shape]["key"]["locationName"] = key
        shapes[shape]["value"]["locationName"] = value
        shapes[shape]["flattened"] = True
    value_shape = shapes["MessageAttributeValue"]["members"]
    value_shape["StringListValues"]["locationName"] = "StringListValue"
    value_shape["BinaryListValues"]["locationName"] = "BinaryListValue"
    out = root / "sqs" / meta["apiVersion"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "service-2.json").write_text(json.dumps(model))
    return root


def client(url: str, protocol: str, data_dir: Path | None = None) -> Any:
    """A boto3 SQS client on ``url`` speaking ``protocol`` (``json`` or ``query``); every
    answer's checksums are verified (`verify_checksums`)."""
    session = botocore.session.get_session()
    if protocol == "query":
        assert data_dir is not None
        session.get_component("data_loader").search_paths.insert(0, str(data_dir))
    sqs = boto3.session.Session(botocore_session=session).client(
        "sqs",
        endpoint_url=url,
        region_name=REGION,
        config=Config(retries={"max_attempts": 1}, read_timeout=40, connect_timeout=5),
        **CREDENTIALS,
    )
    sqs.meta.events.register("before-parameter-build.sqs", _keep_params)
    sqs.meta.events.register("after-call.sqs", _after_call)
    return sqs


# -- answers ---------------------------------------------------------------------------------
def code_of(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return str(excinfo.value.response["Error"]["Code"])


def status_of(excinfo: pytest.ExceptionInfo[ClientError]) -> int:
    return int(excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"])


def attributes(sqs: Any, url: str, *names: str) -> dict[str, str]:
    got: dict[str, str] = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=list(names) or ["All"]
    ).get("Attributes", {})
    return got


# -- checksums ---------------------------------------------------------------------------------
def body_md5(body: str) -> str:
    return hashlib.md5(body.encode()).hexdigest()


def attributes_md5(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """SQS's MD5OfMessageAttributes, written from the specification independently of
    `api.sqs.md5`: per attribute in name order, length-prefixed name, type, a transport byte
    (1 string, 2 binary) and the length-prefixed value."""
    buf = bytearray()

    def put(data: bytes) -> None:
        buf.extend(len(data).to_bytes(4, "big"))
        buf.extend(data)

    for name in sorted(attributes):
        value = attributes[name]
        put(name.encode())
        put(value["DataType"].encode())
        if "BinaryValue" in value:
            buf.append(2)
            put(bytes(value["BinaryValue"]))
        else:
            buf.append(1)
            put(value["StringValue"].encode())
    return hashlib.md5(bytes(buf)).hexdigest()


class ChecksumMismatch(AssertionError):
    pass


def verify_checksums(operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> None:
    """What SDKs that verify checksums do: sends against what was sent, receives against what
    came back. Raises `ChecksumMismatch`."""

    def check(what: str, got: object, want: object) -> None:
        if got != want:
            raise ChecksumMismatch(f"{operation} {what}: answered {got!r}, expected {want!r}")

    def check_sums(body_field: str, body: str, attrs: Any, answer: Mapping[str, Any]) -> None:
        """``answer``'s digests (``body_field``, MD5OfMessageAttributes) of a message."""
        check(body_field, answer.get(body_field), body_md5(body))
        check(
            "MD5OfMessageAttributes",
            answer.get("MD5OfMessageAttributes"),
            attributes_md5(attrs) if attrs else None,
        )

    def check_send(sent: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        check_sums("MD5OfMessageBody", sent["MessageBody"], sent.get("MessageAttributes"), answer)

    if operation == "SendMessage":
        check_send(params, parsed)
    elif operation == "SendMessageBatch":
        by_id = {e["Id"]: e for e in params["Entries"]}
        for ok in parsed.get("Successful", []):
            check_send(by_id[ok["Id"]], ok)
    elif operation == "ReceiveMessage":
        for m in parsed.get("Messages", []):
            check_sums("MD5OfBody", m["Body"], m.get("MessageAttributes"), m)


def _keep_params(params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
    context["cmq_params"] = copy.deepcopy(dict(params))


def _after_call(
    parsed: Mapping[str, Any], model: Any, context: Mapping[str, Any], **_: Any
) -> None:
    if "Error" not in parsed:
        verify_checksums(model.name, context.get("cmq_params", {}), parsed)


# -- a service double ---------------------------------------------------------------------
@dataclass
class MetadataService(RecordingService):
    """The recording double with the catalog metadata calls."""

    meta: dict[str, str] = field(default_factory=dict)

    async def queue_metadata(self, name: str) -> dict[str, str]:
        return dict(self.meta)

    async def update_metadata(
        self, name: str, changes: dict[str, str], unset: list[str]
    ) -> dict[str, str]:
        return {**self.meta, **changes}
