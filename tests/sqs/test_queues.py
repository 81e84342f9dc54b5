"""boto3 against a real 3-node cluster, through both SQS protocols: the queue operations
(create, URLs, listing, attributes, tags, delete, purge) and their errors."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cmq.cluster import unique_queue
from tests.sqs.helpers import ACCOUNT, attributes, code_of, status_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_create_find_list_and_delete(sqs: Any, node1: Any) -> None:
    name = unique_queue("sqs-life")
    url = sqs.create_queue(
        QueueName=name,
        Attributes={"VisibilityTimeout": "7", "DelaySeconds": "0", "MaximumMessageSize": "2048"},
        tags={"team": "core", "env": "test"},
    )["QueueUrl"]
    assert url.endswith(f"/{ACCOUNT}/{name}")
    # Idempotent with the same attributes (and with none); refused with different ones.
    assert (
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "7"})["QueueUrl"] == url
    )
    assert sqs.create_queue(QueueName=name)["QueueUrl"] == url
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "8"})
    assert code_of(e) == "QueueAlreadyExists"
    assert status_of(e) == 400
    # Any node knows the queue; URLs name the node the client called.
    other = node1.get_queue_url(QueueName=name)["QueueUrl"]
    assert other.endswith(f"/{ACCOUNT}/{name}") and other != url
    got = attributes(node1, other)
    assert got["VisibilityTimeout"] == "7"
    assert got["MaximumMessageSize"] == "2048"
    assert got["QueueArn"] == f"arn:aws:sqs:us-east-1:{ACCOUNT}:{name}"
    created = int(got["CreatedTimestamp"])
    assert abs(created - time.time()) < 120
    assert got["LastModifiedTimestamp"] == got["CreatedTimestamp"]
    assert got["ApproximateNumberOfMessages"] == "0"
    assert "RedrivePolicy" not in got
    # Only what is asked for; nothing when nothing is asked for.
    assert set(attributes(sqs, url, "DelaySeconds", "QueueArn")) == {"DelaySeconds", "QueueArn"}
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url)
    assert node1.list_queue_tags(QueueUrl=other)["Tags"] == {"team": "core", "env": "test"}

    assert sqs.list_queues(QueueNamePrefix=name)["QueueUrls"] == [url]
    sqs.delete_queue(QueueUrl=url)
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix=name)
    with pytest.raises(ClientError) as e:
        sqs.get_queue_url(QueueName=name)
    assert code_of(e) == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=url, MessageBody="x")
    assert code_of(e) == "AWS.SimpleQueueService.NonExistentQueue"


def test_list_queues_pages(sqs: Any) -> None:
    prefix = unique_queue("sqs-page")
    names = sorted(f"{prefix}-{i}" for i in range(5))
    urls = [sqs.create_queue(QueueName=n)["QueueUrl"] for n in names]
    try:
        first = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2)
        assert first["QueueUrls"] == urls[:2]
        second = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2, NextToken=first["NextToken"])
        assert second["QueueUrls"] == urls[2:4]
        third = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2, NextToken=second["NextToken"])
        assert third["QueueUrls"] == urls[4:]
        assert "NextToken" not in third
        # botocore's paginator follows the tokens too.
        pages = sqs.get_paginator("list_queues").paginate(
            QueueNamePrefix=prefix, PaginationConfig={"PageSize": 3}
        )
        assert [u for p in pages for u in p.get("QueueUrls", [])] == urls
    finally:
        for url in urls:
            sqs.delete_queue(QueueUrl=url)


def test_set_attributes_and_tags(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=unique_queue("sqs-attrs"))["QueueUrl"]
    before = attributes(sqs, url)
    time.sleep(1.1)  # LastModifiedTimestamp has seconds
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "VisibilityTimeout": "45",
            "MessageRetentionPeriod": "3600",
            "ReceiveMessageWaitTimeSeconds": "2",
            "DelaySeconds": "3",
            "MaximumMessageSize": "1024",
        },
    )
    after = attributes(sqs, url)
    assert after["VisibilityTimeout"] == "45"
    assert after["MessageRetentionPeriod"] == "3600"
    assert after["ReceiveMessageWaitTimeSeconds"] == "2"
    assert after["DelaySeconds"] == "3"
    assert after["MaximumMessageSize"] == "1024"
    assert int(after["LastModifiedTimestamp"]) > int(before["LastModifiedTimestamp"])
    assert after["CreatedTimestamp"] == before["CreatedTimestamp"]

    # Refused changes change nothing.
    for bad, code in [
        ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ({"VisibilityTimeout": "soon"}, "InvalidAttributeValue"),
        ({"Colour": "blue"}, "InvalidAttributeName"),
        ({"Policy": "[1]"}, "InvalidAttributeValue"),
        ({"KmsDataKeyReusePeriodSeconds": "59"}, "InvalidAttributeValue"),
        ({"SqsManagedSseEnabled": "yes"}, "InvalidAttributeValue"),
        ({"FifoQueue": "true"}, "InvalidParameterValue"),  # a standard queue stays one
        ({"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
        ({"RedrivePolicy": "not json"}, "InvalidAttributeValue"),
    ]:
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "9", **bad})
        assert code_of(e) == code, bad
    assert attributes(sqs, url) == {
        **after,
        "LastModifiedTimestamp": after["LastModifiedTimestamp"],
    }
    with pytest.raises(ClientError) as e:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"])
    assert code_of(e) == "InvalidAttributeName"

    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
    sqs.tag_queue(QueueUrl=url, Tags={"a": "1", "b": "2"})
    sqs.tag_queue(QueueUrl=url, Tags={"b": "3"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "1", "b": "3"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["a", "missing"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"b": "3"}
    with pytest.raises(ClientError) as e:
        sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)})
    assert code_of(e) == "InvalidParameterValue"
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"b": "3"}
    sqs.delete_queue(QueueUrl=url)


def test_refused_queue_requests(sqs: Any) -> None:
    # A .fifo name needs FifoQueue=true, and FifoQueue=true needs a .fifo name.
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName=unique_queue("sqs-nofifo") + ".fifo")
    assert code_of(e) == "InvalidParameterValue"
    assert "FifoQueue" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName=unique_queue("sqs-fifo"), Attributes={"FifoQueue": "true"})
    assert code_of(e) == "InvalidParameterValue"
    for bad in ("has space", "x" * 81, ""):
        with pytest.raises(ClientError) as e:
            sqs.create_queue(QueueName=bad)
        assert code_of(e) == "InvalidParameterValue", bad
    with pytest.raises(ClientError) as e:
        sqs.get_queue_url(QueueName="no-such-queue-anywhere")
    assert code_of(e) == "AWS.SimpleQueueService.NonExistentQueue"
    assert status_of(e) == 400
    with pytest.raises(ClientError) as e:
        sqs.get_queue_attributes(QueueUrl="http://h/111111111111/q", AttributeNames=["All"])
    assert code_of(e) == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(ClientError) as e:
        sqs.add_permission(
            QueueUrl=f"http://h/{ACCOUNT}/no-such-queue-anywhere",
            Label="l",
            AWSAccountIds=["111111111111"],
            Actions=["*"],
        )
    assert code_of(e) == "AWS.SimpleQueueService.NonExistentQueue"


def test_redrive_policy_and_dead_letter_sources(sqs: Any) -> None:
    dlq_name, src_name = unique_queue("sqs-dlq"), unique_queue("sqs-src")
    dlq = sqs.create_queue(QueueName=dlq_name)["QueueUrl"]
    dlq_arn = attributes(sqs, dlq, "QueueArn")["QueueArn"]
    policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1}
    src = sqs.create_queue(
        QueueName=src_name,
        Attributes={"RedrivePolicy": json.dumps(policy), "VisibilityTimeout": "1"},
    )["QueueUrl"]
    got = json.loads(attributes(sqs, src, "RedrivePolicy")["RedrivePolicy"])
    assert got == policy
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]

    # A received message that is not deleted reaches the DLQ after maxReceiveCount receives.
    sqs.send_message(QueueUrl=src, MessageBody="poison")
    first = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=5, VisibilityTimeout=1)
    assert [m["Body"] for m in first["Messages"]] == ["poison"]
    moved: dict[str, Any] = {}
    deadline = time.monotonic() + 20
    while "Messages" not in moved and time.monotonic() < deadline:
        # Once visible again, the next receive dead-letters it instead of delivering it.
        again = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=2)
        assert "Messages" not in again
        moved = sqs.receive_message(
            QueueUrl=dlq, WaitTimeSeconds=2, AttributeNames=["ApproximateReceiveCount"]
        )
    assert [m["Body"] for m in moved["Messages"]] == ["poison"]
    assert "Messages" not in sqs.receive_message(QueueUrl=src, WaitTimeSeconds=0)

    # RedriveAllowPolicy is enforced on the sources that name the queue; bad targets refused.
    closed = sqs.create_queue(
        QueueName=unique_queue("sqs-closed"),
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})},
    )["QueueUrl"]
    closed_arn = attributes(sqs, closed, "QueueArn")["QueueArn"]
    assert json.loads(attributes(sqs, closed, "RedriveAllowPolicy")["RedriveAllowPolicy"]) == {
        "redrivePermission": "denyAll"
    }
    for target, code in [
        (closed_arn, "InvalidParameterValue"),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:no-such-dlq", "InvalidParameterValue"),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:{src_name}", "InvalidParameterValue"),
    ]:
        bad = json.dumps({"deadLetterTargetArn": target, "maxReceiveCount": 3})
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": bad})
        assert code_of(e) == code, target
    assert json.loads(attributes(sqs, src, "RedrivePolicy")["RedrivePolicy"]) == policy
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(
            QueueUrl=src,
            Attributes={"RedrivePolicy": json.dumps({**policy, "maxReceiveCount": 0})},
        )
    assert code_of(e) == "InvalidAttributeValue"

    # An empty RedrivePolicy removes it.
    sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": ""})
    assert "RedrivePolicy" not in attributes(sqs, src)
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq).get("queueUrls", []) == []
    for url in (src, dlq, closed):
        sqs.delete_queue(QueueUrl=url)


def test_purge(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=unique_queue("sqs-purge"))["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    assert attributes(sqs, url, "ApproximateNumberOfMessages") == {
        "ApproximateNumberOfMessages": "3"
    }
    sqs.purge_queue(QueueUrl=url)
    assert attributes(sqs, url, "ApproximateNumberOfMessages") == {
        "ApproximateNumberOfMessages": "0"
    }
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    sqs.delete_queue(QueueUrl=url)
