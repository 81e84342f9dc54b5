"""Every SQS operation on arbitrary parameters, against a recording test double of the queue
service: it answers or raises an `SqsError` (never another exception), and a refused request
made no call that changes anything. The query parser likewise refuses only with SqsErrors."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.sqs.calls import Caller
from api.sqs.errors import SqsError
from api.sqs.moves import MoveTasks
from api.sqs.operations import OPERATIONS
from api.sqs.protocol import query_params
from api.sqs.queues import SqsSettings
from tests.sqs.helpers import MetadataService

CHANGING = {
    "create_queue",
    "set_attributes",
    "delete_queue",
    "purge",
    "send",
    "receive",
    "ack",
    "change_visibility",
    "nack",
    "update_metadata",
}


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 2**40),
    st.text(max_size=12),
    st.sampled_from(
        [
            "All",
            "1",
            "0",
            "String",
            "Number",
            "Binary",
            "dlq",
            ".*",
            "aGk=",
            "arn:aws:sqs:us-east-1:000000000000:alpha",
            "arn:aws:sqs:us-east-1:000000000000:beta",
            "YWxwaGEvdGFzaw==",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "Id",
                    "DataType",
                    "StringValue",
                    "BinaryValue",
                    "MessageBody",
                    "ReceiptHandle",
                    "VisibilityTimeout",
                    "k",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
KEYS = [
    "QueueName",
    "Attributes",
    "tags",
    "Tags",
    "TagKeys",
    "AttributeNames",
    "MessageSystemAttributeNames",
    "MessageAttributeNames",
    "MessageBody",
    "DelaySeconds",
    "MessageAttributes",
    "MessageSystemAttributes",
    "Entries",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "WaitTimeSeconds",
    "ReceiptHandle",
    "QueueNamePrefix",
    "MaxResults",
    "NextToken",
    "MessageGroupId",
]
urls = st.sampled_from(
    ["http://h/000000000000/alpha", "/000000000000/beta", "http://h/1/alpha", "x", ""]
)
params = st.builds(
    lambda base, url: {**base, **({} if url is None else {"QueueUrl": url})},
    st.dictionaries(st.sampled_from(KEYS), values, max_size=5),
    st.none() | urls,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(OPERATIONS)), params)
def test_operations_answer_or_refuse_cleanly(operation: str, p: dict[str, Any]) -> None:
    service = MetadataService()
    caller = Caller(service, SqsSettings(), "http://h:1", "AKID", MoveTasks(service, SqsSettings()))
    try:
        result = asyncio.run(OPERATIONS[operation](caller, p))
    except SqsError as e:
        assert e.code and e.message and 400 <= e.status < 600
        assert CHANGING.isdisjoint(service.methods()), (operation, p, service.methods())
        return
    assert result is None or isinstance(result, dict)


@given(st.lists(st.tuples(st.text(max_size=30), st.text(max_size=10)), max_size=8))
def test_query_parsing_refuses_only_with_sqs_errors(pairs: list[tuple[str, str]]) -> None:
    try:
        out = query_params(pairs)
    except SqsError as e:
        assert e.code == "MalformedQueryString"
        return
    assert isinstance(out, dict)


@given(
    st.lists(
        st.tuples(
            st.from_regex(
                r"(Attribute|Tag|Entries|SendMessageBatchRequestEntry|MessageAttribute"
                r"|AttributeName)(\.[0-9a-zA-Z]{1,3}){0,4}",
                fullmatch=True,
            ),
            st.text(max_size=5),
        ),
        max_size=8,
    )
)
def test_query_parsing_of_structured_names(pairs: list[tuple[str, str]]) -> None:
    try:
        query_params(pairs)
    except SqsError as e:
        assert e.code == "MalformedQueryString"
