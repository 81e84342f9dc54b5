"""The SQS surface's pure parts: checksums, query-protocol parsing, XML and JSON rendering,
queue and message attribute checks, and the cmq encoding of typed message attributes."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.sqs import errors, messages, protocol, queues
from api.sqs.md5 import AttributeValue, md5_of_attributes, md5_of_body
from cmq.model import QueueAttributes
from tests.sqs.helpers import ChecksumMismatch, attributes_md5, verify_checksums

NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"
SETTINGS = queues.SqsSettings()


def test_body_checksum_is_md5_of_utf8() -> None:
    assert md5_of_body("hello") == "5d41402abc4b2a76b9719d911017c592"
    assert md5_of_body("é") == hashlib.md5("é".encode()).hexdigest()


def test_attribute_checksum_encoding() -> None:
    """One attribute of each transport, laid out by hand."""
    value = AttributeValue("String", string_value="v")
    expected = hashlib.md5(
        b"\0\0\0\x01k" + b"\0\0\0\x06String" + b"\x01" + b"\0\0\0\x01v"
    ).hexdigest()
    assert md5_of_attributes({"k": value}) == expected
    blob = AttributeValue("Binary", binary_value=b"\x00\xff")
    expected = hashlib.md5(
        b"\0\0\0\x01b" + b"\0\0\0\x06Binary" + b"\x02" + b"\0\0\0\x02\x00\xff"
    ).hexdigest()
    assert md5_of_attributes({"b": blob}) == expected
    assert md5_of_attributes({}) is None


names = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
typed = st.one_of(
    st.builds(
        lambda t, s: AttributeValue(t, string_value=s),
        st.sampled_from(["String", "Number", "String.x"]),
        st.text(min_size=1, max_size=20),
    ),
    st.builds(
        lambda t, b: AttributeValue(t, binary_value=b),
        st.sampled_from(["Binary", "Binary.gz"]),
        st.binary(min_size=1, max_size=20),
    ),
)


@given(st.dictionaries(names, typed, min_size=1, max_size=10))
def test_attribute_checksum_matches_an_independent_implementation(
    attrs: dict[str, AttributeValue],
) -> None:
    as_sent = {k: messages.render_attribute(v) for k, v in attrs.items()}
    for k, v in as_sent.items():
        if "BinaryValue" in v:
            v["BinaryValue"] = attrs[k].binary_value  # type: ignore[assignment]
    assert md5_of_attributes(attrs) == attributes_md5(as_sent)


@given(st.dictionaries(names, typed, max_size=10), st.text(max_size=30))
def test_typed_attributes_survive_the_cmq_encoding(
    attrs: dict[str, AttributeValue], sender: str
) -> None:
    pairs = messages.encode_attributes(attrs, sender, "Root=1-trace")
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in pairs)
    decoded, reserved = messages.decode_attributes(pairs)
    assert decoded == attrs
    assert reserved[messages.SENDER_KEY] == sender
    assert reserved[messages.TRACE_KEY] == "Root=1-trace"


def test_plain_cmq_attributes_read_as_strings() -> None:
    decoded, reserved = messages.decode_attributes([("colour", "blue")])
    assert decoded == {"colour": AttributeValue("String", string_value="blue")}
    assert reserved == {}


def test_the_checksum_check_of_the_tests_bites() -> None:
    sent = {
        "MessageBody": "x",
        "MessageAttributes": {"a": {"DataType": "String", "StringValue": "1"}},
    }
    good = {
        "MD5OfMessageBody": md5_of_body("x"),
        "MD5OfMessageAttributes": attributes_md5(sent["MessageAttributes"]),  # type: ignore[arg-type]
    }
    verify_checksums("SendMessage", sent, good)
    for key in good:
        with pytest.raises(ChecksumMismatch):
            verify_checksums("SendMessage", sent, {**good, key: "0" * 32})
    received = {"Messages": [{"Body": "x", "MD5OfBody": md5_of_body("y")}]}
    with pytest.raises(ChecksumMismatch):
        verify_checksums("ReceiveMessage", {}, received)


# -- query protocol ------------------------------------------------------------------------------
def test_query_parameters_take_the_json_shape() -> None:
    pairs = [
        ("Action", "SendMessageBatch"),
        ("QueueUrl", "http://h/000000000000/q"),
        ("SendMessageBatchRequestEntry.2.Id", "b"),
        ("SendMessageBatchRequestEntry.2.MessageBody", "second"),
        ("SendMessageBatchRequestEntry.1.Id", "a"),
        ("SendMessageBatchRequestEntry.1.MessageBody", "first"),
        ("SendMessageBatchRequestEntry.1.DelaySeconds", "5"),
        ("SendMessageBatchRequestEntry.1.MessageAttribute.1.Name", "k"),
        ("SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType", "String"),
        ("SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue", "v"),
    ]
    assert protocol.query_params(pairs) == {
        "Action": "SendMessageBatch",
        "QueueUrl": "http://h/000000000000/q",
        "Entries": [
            {
                "Id": "a",
                "MessageBody": "first",
                "DelaySeconds": 5,
                "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
            },
            {"Id": "b", "MessageBody": "second"},
        ],
    }
    assert protocol.query_params(
        [
            ("Attribute.1.Name", "DelaySeconds"),
            ("Attribute.1.Value", "3"),
            ("Tag.1.Key", "t"),
            ("Tag.1.Value", ""),
            ("AttributeName.2", "B"),
            ("AttributeName.1", "A"),
        ]
    ) == {"Attributes": {"DelaySeconds": "3"}, "Tags": {"t": ""}, "AttributeNames": ["A", "B"]}
    assert protocol.query_params([("Entries", ""), ("Attributes", "")]) == {
        "Entries": [],
        "Attributes": {},
    }


@pytest.mark.parametrize(
    "pairs",
    [
        [("AttributeName.x", "A")],
        [("AttributeName.0", "A")],
        [("AttributeName", "A")],
        [("QueueUrl", "a"), ("QueueUrl", "b")],
        [("QueueUrl", "a"), ("QueueUrl.1", "b")],
        [("Attribute.1.Value", "3")],
    ],
)
def test_malformed_query_parameters_are_refused(pairs: list[tuple[str, str]]) -> None:
    with pytest.raises(errors.MalformedQueryString):
        protocol.query_params(pairs)


def test_xml_answers_escape_and_flatten() -> None:
    result: dict[str, Any] = {
        "Messages": [
            {
                "MessageId": "m1",
                "Body": 'a\r\nb <&> "q"',
                "Attributes": {"SentTimestamp": "1"},
                "MessageAttributes": {"k": {"StringValue": "v", "DataType": "String"}},
            }
        ]
    }
    root = ET.fromstring(protocol.render_xml("ReceiveMessage", result, "rid"))
    assert root.tag == f"{NS}ReceiveMessageResponse"
    message = root.find(f"{NS}ReceiveMessageResult/{NS}Message")
    assert message is not None
    assert message.findtext(f"{NS}Body") == 'a\r\nb <&> "q"'
    assert message.findtext(f"{NS}Attribute/{NS}Name") == "SentTimestamp"
    assert message.findtext(f"{NS}MessageAttribute/{NS}Value/{NS}StringValue") == "v"
    assert root.findtext(f"{NS}ResponseMetadata/{NS}RequestId") == "rid"
    empty = ET.fromstring(protocol.render_xml("DeleteQueue", None, "r"))
    assert empty.find(f"{NS}DeleteQueueResult") is None


def test_errors_in_each_protocol() -> None:
    error = errors.QueueDoesNotExist("The specified queue does not exist.")
    body, headers = protocol.render_json_error(error)
    assert orjson.loads(body) == {
        "__type": "com.amazonaws.sqs#QueueDoesNotExist",
        "message": "The specified queue does not exist.",
    }
    assert headers == {"x-amzn-query-error": "AWS.SimpleQueueService.NonExistentQueue;Sender"}
    root = ET.fromstring(protocol.render_xml_error(error, "rid"))
    assert root.findtext(f"{NS}Error/{NS}Code") == "AWS.SimpleQueueService.NonExistentQueue"
    assert root.findtext(f"{NS}Error/{NS}Type") == "Sender"
    assert root.findtext(f"{NS}RequestId") == "rid"
    assert error.status == 400
    internal = errors.InternalFailure("x")
    assert (internal.status, internal.sender_fault) == (500, False)


# -- queues and messages ------------------------------------------------------------------------
def test_queue_urls_and_arns() -> None:
    assert SETTINGS.name_of_url("http://10.0.0.1:8080/000000000000/orders") == "orders"
    assert SETTINGS.name_of_url("/000000000000/orders") == "orders"
    with pytest.raises(errors.QueueDoesNotExist):
        SETTINGS.name_of_url("http://h/123456789012/orders")
    for bad in ("http://h/orders", "http://h/000000000000/a/b", "", None):
        with pytest.raises(errors.InvalidParameterValue):
            SETTINGS.name_of_url(bad)
    assert SETTINGS.name_of_url("http://h/000000000000/orders.fifo") == "orders.fifo"
    with pytest.raises(errors.InvalidParameterValue):
        SETTINGS.name_of_url("http://h/000000000000/orders.fifo.fifo")
    assert SETTINGS.name_of_arn("arn:aws:sqs:eu-west-1:000000000000:dlq", "p") == "dlq"
    with pytest.raises(ValueError):
        queues.SqsSettings(account="12")


def test_queue_attribute_parsing() -> None:
    parsed = queues.parse_attributes(
        {
            "VisibilityTimeout": "10",
            "RedrivePolicy": '{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:d",'
            '"maxReceiveCount":"4"}',
            "RedriveAllowPolicy": '{"redrivePermission":"byQueue","sourceQueueArns":'
            '["arn:aws:sqs:us-east-1:000000000000:s"]}',
            "FifoQueue": "false",
        },
        SETTINGS,
        "q",
    )
    assert parsed.cmq == {
        "visibility_timeout": 10,
        "dead_letter_queue": "d",
        "max_receive_count": 4,
    }
    assert parsed.dead_letter_target == "d"
    allow = parsed.meta[queues.META_REDRIVE_ALLOW]
    assert queues.redrive_allows(allow, "arn:aws:sqs:us-east-1:000000000000:s")
    assert not queues.redrive_allows(allow, "arn:aws:sqs:us-east-1:000000000000:t")
    for bad, error in [
        ({"VisibilityTimeout": "-1"}, errors.InvalidAttributeValue),
        ({"VisibilityTimeout": 5}, errors.InvalidAttributeValue),
        ({"MaximumMessageSize": "1048577"}, errors.InvalidAttributeValue),
        ({"Nope": "1"}, errors.InvalidAttributeName),
        ({"KmsDataKeyReusePeriodSeconds": "86401"}, errors.InvalidAttributeValue),
        ({"KmsMasterKeyId": "k", "SqsManagedSseEnabled": "true"}, errors.InvalidAttributeValue),
        ({"Policy": "not json"}, errors.InvalidAttributeValue),
        ({"ContentBasedDeduplication": "true"}, errors.InvalidAttributeName),
        ({"FifoQueue": "true"}, errors.InvalidParameterValue),
        ({"RedrivePolicy": '{"maxReceiveCount":1}'}, errors.InvalidAttributeValue),
        ({"RedriveAllowPolicy": '{"redrivePermission":"some"}'}, errors.InvalidAttributeValue),
        ({"RedriveAllowPolicy": '{"redrivePermission":"byQueue"}'}, errors.InvalidAttributeValue),
    ]:
        with pytest.raises(error):
            queues.parse_attributes(bad, SETTINGS, "q")
    fifo = queues.parse_attributes(
        {
            "FifoQueue": "true",
            "ContentBasedDeduplication": "true",
            "DeduplicationScope": "queue",
            "FifoThroughputLimit": "perQueue",
        },
        SETTINGS,
        "q.fifo",
    )
    assert fifo.cmq == {"fifo": True, "content_based_deduplication": True}
    for bad, error in [
        ({"FifoQueue": "false"}, errors.InvalidParameterValue),
        ({"FifoQueue": "yes"}, errors.InvalidAttributeValue),
        ({"ContentBasedDeduplication": "maybe"}, errors.InvalidAttributeValue),
        ({"DeduplicationScope": "messageGroup"}, errors.InvalidAttributeValue),
        ({"FifoThroughputLimit": "perMessageGroupId"}, errors.InvalidAttributeValue),
    ]:
        with pytest.raises(error):
            queues.parse_attributes(bad, SETTINGS, "q.fifo")


def test_policy_and_encryption_attributes_go_to_the_metadata() -> None:
    parsed = queues.parse_attributes(
        {"Policy": '{"Statement": []}', "KmsMasterKeyId": "alias/k"}, SETTINGS, "q"
    )
    assert parsed.cmq == {}
    assert parsed.meta == {
        queues.META_POLICY: '{"Statement": []}',
        queues.META_KMS_KEY: "alias/k",
        queues.META_SSE: "false",  # a key turns SSE-SQS off
    }
    sse = queues.parse_attributes({"SqsManagedSseEnabled": "true", "Policy": ""}, SETTINGS, "q")
    assert sse.meta == {
        queues.META_SSE: "true",
        queues.META_POLICY: None,  # removed
        queues.META_KMS_KEY: None,  # SSE-SQS removes a key
        queues.META_KMS_REUSE: None,
    }
    shown = queues.render_attributes(
        {"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled", "Policy"},
        attributes=QueueAttributes(),
        stats=SimpleNamespace(visible=0, in_flight=0, delayed=0),
        meta={queues.META_KMS_KEY: "alias/k"},
        name="q",
        settings=SETTINGS,
    )
    assert shown == {
        "KmsMasterKeyId": "alias/k",
        "KmsDataKeyReusePeriodSeconds": "300",
        "SqsManagedSseEnabled": "false",
    }


def test_message_attribute_names_resolve_as_in_sqs() -> None:
    stored = {n: AttributeValue("String", string_value="v") for n in ("a.b", "ab", "A.c", "z")}
    for everything in (["All"], [".*"], ["*"]):
        assert messages.select_attributes(stored, everything) == stored
    assert set(messages.select_attributes(stored, ["a.*", "z"])) == {"a.b", "z"}
    assert messages.select_attributes(stored, ["a"]) == {}
    assert messages.select_attributes(stored, None) == {}


@pytest.mark.parametrize("name", ["AWS.x", "amazon.y", ".a", "a.", "a..b", "a b", "x" * 257, ""])
def test_reserved_and_malformed_attribute_names_are_refused(name: str) -> None:
    with pytest.raises(errors.InvalidParameterValue):
        messages.parse_attributes({name: {"DataType": "String", "StringValue": "v"}})


def test_message_bodies_are_xml_characters() -> None:
    assert messages.check_body("tab\tnl\ncr\r ok \U0001f600") == "tab\tnl\ncr\r ok \U0001f600"
    for bad in ("\x00", "\x08", "\ufffe", "\ud800"):
        with pytest.raises(errors.InvalidMessageContents):
            messages.check_body(f"a{bad}b")
