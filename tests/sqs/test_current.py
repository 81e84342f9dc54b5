"""boto3 against the session's real 3-node cluster, JSON and query protocols: SQS's behaviour
of 2025 that cmq follows. The 1 MiB message size (default and limit; a batch's total too), a
FIFO SendMessageBatch refused as a whole for an entry without its group or deduplication id,
the ``MessageAttributeNames`` wildcards, a FIFO group unblocked by the receive that moves its
head to the dead-letter queue, the stored access-policy and encryption attributes,
AddPermission refused, and fair queues (a MessageGroupId on a standard queue names a tenant)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cmq.cluster import unique_queue
from tests.sqs.helpers import attributes, code_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MIB = 1_048_576
SYSTEM = ["MessageGroupId", "ApproximateReceiveCount"]


@pytest.fixture
def queue(sqs: Any) -> Iterator[str]:
    url: str = sqs.create_queue(QueueName=unique_queue("sqs-now"))["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


def _fifo(sqs: Any, prefix: str, **attrs: str) -> str:
    name = unique_queue(prefix) + ".fifo"
    url: str = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attrs})[
        "QueueUrl"
    ]
    return url


def _count(sqs: Any, url: str) -> int:
    return int(attributes(sqs, url, "ApproximateNumberOfMessages")["ApproximateNumberOfMessages"])


def test_one_mebibyte_is_the_default_and_the_limit(sqs: Any, queue: str) -> None:
    assert attributes(sqs, queue, "MaximumMessageSize") == {"MaximumMessageSize": str(MIB)}
    body = "a" * MIB
    sent = sqs.send_message(QueueUrl=queue, MessageBody=body)
    (got,) = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"]
    assert got["MessageId"] == sent["MessageId"]
    assert got["Body"] == body
    # One byte more, in the body or in an attribute, is refused and stores nothing.
    for params in (
        {"MessageBody": body + "a"},
        {
            "MessageBody": body[:-7],  # + "k", "String", "v": 1 MiB + 1
            "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
        },
    ):
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=queue, **params)
        assert code_of(e) == "InvalidParameterValue"
    assert _count(sqs, queue) == 1
    # A batch: each entry and the total at most 1 MiB.
    ok = sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": "a", "MessageBody": body}])
    assert [e["Id"] for e in ok["Successful"]] == ["a"]
    half = "b" * (MIB // 2)
    with pytest.raises(ClientError) as e:
        sqs.send_message_batch(
            QueueUrl=queue,
            Entries=[
                {"Id": "a", "MessageBody": half},
                {"Id": "b", "MessageBody": half + "b"},
            ],
        )
    assert code_of(e) == "AWS.SimpleQueueService.BatchRequestTooLong"
    assert _count(sqs, queue) == 2
    # The attribute is settable down to 1 KiB and no higher than 1 MiB.
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=queue, Attributes={"MaximumMessageSize": str(MIB + 1)})
    assert code_of(e) == "InvalidAttributeValue"
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"MaximumMessageSize": "1024"})
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="c" * 1025)
    assert code_of(e) == "InvalidParameterValue"


def test_a_fifo_batch_missing_an_id_is_refused_whole(sqs: Any) -> None:
    url = _fifo(sqs, "now-fifo-batch")
    full = {"MessageGroupId": "g", "MessageDeduplicationId": "d1"}
    cases = [
        ({"MessageDeduplicationId": "d2"}, "MissingParameter", "MessageGroupId"),
        ({"MessageGroupId": "g"}, "InvalidParameterValue", "ContentBasedDeduplication"),
    ]
    for lacking, code, said in cases:
        with pytest.raises(ClientError) as e:
            sqs.send_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": "ok", "MessageBody": "x", **full},
                    {"Id": "lacking", "MessageBody": "y", **lacking},
                ],
            )
        assert code_of(e) == code, lacking
        assert said in e.value.response["Error"]["Message"]
    assert _count(sqs, url) == 0  # nothing of either batch was sent
    # With content-based deduplication a batch needs no deduplication ids.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "true"})
    done = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": f"m{i}", "MessageGroupId": "g"} for i in range(3)],
    )
    assert len(done["Successful"]) == 3 and not done.get("Failed")
    sqs.delete_queue(QueueUrl=url)


def test_message_attribute_names_wildcards(sqs: Any, queue: str) -> None:
    value = {"DataType": "String", "StringValue": "v"}
    names = ("foo.a", "foo.b", "foobar", "Foo.c", "other")
    sqs.send_message(QueueUrl=queue, MessageBody="m", MessageAttributes=dict.fromkeys(names, value))

    def selected(wanted: list[str]) -> set[str]:
        (m,) = sqs.receive_message(
            QueueUrl=queue, MessageAttributeNames=wanted, VisibilityTimeout=0
        )["Messages"]
        return set(m.get("MessageAttributes", {}))

    for everything in (["All"], [".*"], ["*"], ["other", "All"]):
        assert selected(everything) == set(names), everything
    assert selected(["foo.*"]) == {"foo.a", "foo.b"}  # the prefix "foo.", case-sensitive
    assert selected(["foo.*", "other", "absent"]) == {"foo.a", "foo.b", "other"}
    assert selected(["foo"]) == set()


def test_a_receive_that_dead_letters_a_fifo_head_unblocks_its_group(sqs: Any) -> None:
    dlq = _fifo(sqs, "now-fifo-dlq")
    arn = attributes(sqs, dlq, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1})
    src = _fifo(sqs, "now-fifo-src", ContentBasedDeduplication="true", RedrivePolicy=policy)
    for body in ("poison", "next", "last"):
        sqs.send_message(QueueUrl=src, MessageBody=body, MessageGroupId="g")
    (first,) = sqs.receive_message(QueueUrl=src, VisibilityTimeout=0)["Messages"]
    assert first["Body"] == "poison"
    # No wait: the receive that finds the head at its limit moves it and answers with the
    # group's next messages.
    got = sqs.receive_message(
        QueueUrl=src, MaxNumberOfMessages=10, VisibilityTimeout=30, WaitTimeSeconds=0
    )
    assert [m["Body"] for m in got["Messages"]] == ["next", "last"]
    (moved,) = sqs.receive_message(
        QueueUrl=dlq, MessageSystemAttributeNames=SYSTEM, WaitTimeSeconds=5
    )["Messages"]
    assert (moved["Body"], moved["Attributes"]["MessageGroupId"]) == ("poison", "g")
    for url in (src, dlq):
        sqs.delete_queue(QueueUrl=url)


def test_policy_and_encryption_attributes_are_stored(sqs: Any) -> None:
    policy = json.dumps({"Version": "2012-10-17", "Statement": []})
    url = sqs.create_queue(
        QueueName=unique_queue("now-sse"),
        Attributes={"Policy": policy, "SqsManagedSseEnabled": "true"},
    )["QueueUrl"]
    got = attributes(sqs, url)
    assert got["Policy"] == policy
    assert got["SqsManagedSseEnabled"] == "true"
    assert "KmsMasterKeyId" not in got
    # CreateQueue again: the same queue with the same values (a policy compares as JSON), else
    # QueueAlreadyExists.
    name = url.rsplit("/", 1)[1]
    same = {"Policy": json.dumps(json.loads(policy), indent=2), "SqsManagedSseEnabled": "true"}
    assert sqs.create_queue(QueueName=name, Attributes=same)["QueueUrl"] == url
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName=name, Attributes={"Policy": json.dumps({"Statement": [1]})})
    assert code_of(e) == "QueueAlreadyExists"
    # SSE-KMS instead: SSE-SQS turns off; the key's reuse period defaults to 300 s.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "alias/aws/sqs"})
    got = attributes(sqs, url, "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "All")
    assert got["KmsMasterKeyId"] == "alias/aws/sqs"
    assert got["KmsDataKeyReusePeriodSeconds"] == "300"
    assert got["SqsManagedSseEnabled"] == "false"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsDataKeyReusePeriodSeconds": "86400"})
    before = attributes(sqs, url)
    for bad in (
        {"Policy": "{not json"},
        {"KmsDataKeyReusePeriodSeconds": "59"},
        {"KmsDataKeyReusePeriodSeconds": "86401"},
        {"SqsManagedSseEnabled": "yes"},
        {"SqsManagedSseEnabled": "true", "KmsMasterKeyId": "k"},
    ):
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "7", **bad})
        assert code_of(e) == "InvalidAttributeValue", bad
    assert attributes(sqs, url) == before
    # Back to SSE-SQS: the key goes; an empty Policy removes it.
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"SqsManagedSseEnabled": "true", "Policy": ""}
    )
    got = attributes(sqs, url)
    assert got["SqsManagedSseEnabled"] == "true"
    assert not {"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "Policy"} & set(got)
    # Permissions name AWS accounts: refused, the queue unchanged.
    with pytest.raises(ClientError) as e:
        sqs.add_permission(
            QueueUrl=url, Label="l", AWSAccountIds=["111111111111"], Actions=["SendMessage"]
        )
    assert code_of(e) == "AWS.SimpleQueueService.UnsupportedOperation"
    with pytest.raises(ClientError) as e:
        sqs.remove_permission(QueueUrl=url, Label="l")
    assert code_of(e) == "AWS.SimpleQueueService.UnsupportedOperation"
    assert "Policy" not in attributes(sqs, url)
    sqs.delete_queue(QueueUrl=url)


def test_a_standard_queues_group_ids_are_tenants_served_fairly(sqs: Any, queue: str) -> None:
    heavy = [{"Id": str(i), "MessageBody": f"h{i}", "MessageGroupId": "heavy"} for i in range(10)]
    for _ in range(3):  # a backlog of 30 from one tenant, sent first
        assert not sqs.send_message_batch(QueueUrl=queue, Entries=heavy).get("Failed")
    sqs.send_message(QueueUrl=queue, MessageBody="light", MessageGroupId="light")
    sqs.send_message(QueueUrl=queue, MessageBody="plain")  # no group id: a tenant of its own
    got = sqs.receive_message(
        QueueUrl=queue,
        MaxNumberOfMessages=3,
        MessageSystemAttributeNames=["MessageGroupId", "SequenceNumber"],
    )["Messages"]
    # Round-robin over the tenants: the later light and plain messages are not behind the 30.
    assert sorted(m["Body"] for m in got) == ["h0", "light", "plain"]
    groups = {m["Body"]: m.get("Attributes", {}).get("MessageGroupId") for m in got}
    assert groups == {"h0": "heavy", "light": "light", "plain": None}
    assert all("SequenceNumber" not in m.get("Attributes", {}) for m in got)
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="x", MessageGroupId="bad id")
    assert code_of(e) == "InvalidParameterValue"
