"""boto3 against the session's real 3-node cluster, JSON and query protocols: FIFO queues
(creation rules, group order and blocking, dedup by id and by content, SequenceNumber, the
FIFO system attributes, ReceiveRequestAttemptId, the refused parameters, and a FIFO
dead-letter queue with its redrive back to the source)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cmq.cluster import unique_queue
from tests.sqs.helpers import ACCOUNT, attributes, code_of

INVALID_VALUE = "InvalidAttributeValue"
SYSTEM = ["MessageGroupId", "MessageDeduplicationId", "SequenceNumber"]


def fifo_queue(sqs: Any, prefix: str, **attrs: str) -> str:
    name = unique_queue(prefix) + ".fifo"
    url: str = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attrs})[
        "QueueUrl"
    ]
    return url


def receive(sqs: Any, url: str, n: int = 10, **kw: Any) -> list[dict[str, Any]]:
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=n, MessageSystemAttributeNames=SYSTEM, **kw
    )
    return list(got.get("Messages", []))


def test_create_rules_and_attributes(sqs: Any) -> None:
    url = fifo_queue(sqs, "fifo-attrs", ContentBasedDeduplication="true")
    got = attributes(sqs, url, "All")
    assert got["FifoQueue"] == "true"
    assert got["ContentBasedDeduplication"] == "true"
    assert got["DeduplicationScope"] == "queue"
    assert got["FifoThroughputLimit"] == "perQueue"
    # Same call again: the same queue; a standard queue shows no FIFO attribute.
    name = url.rsplit("/", 1)[1]
    again = sqs.create_queue(
        QueueName=name, Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )
    assert again["QueueUrl"] == url
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "false"})
    assert attributes(sqs, url, "ContentBasedDeduplication") == {
        "ContentBasedDeduplication": "false"
    }
    std = sqs.create_queue(QueueName=unique_queue("fifo-std"))["QueueUrl"]
    assert "FifoQueue" not in attributes(sqs, std, "All")
    refused = [
        ({"FifoQueue": "true", "DeduplicationScope": "messageGroup"}, "InvalidAttributeValue"),
        (
            {"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId"},
            "InvalidAttributeValue",
        ),
        ({"FifoQueue": "false"}, "InvalidParameterValue"),
        ({}, "InvalidParameterValue"),
    ]
    for attrs, code in refused:
        bad = unique_queue("fifo-bad") + ".fifo"
        with pytest.raises(ClientError) as e:
            sqs.create_queue(QueueName=bad, Attributes=attrs)
        assert code_of(e) == code, attrs
        with pytest.raises(ClientError) as e:
            sqs.get_queue_url(QueueName=bad)
        assert code_of(e) == "AWS.SimpleQueueService.NonExistentQueue"
    # A FIFO queue's dead-letter queue must be FIFO.
    policy = json.dumps(
        {"deadLetterTargetArn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:no-fifo", "maxReceiveCount": 2}
    )
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    assert code_of(e) == "InvalidParameterValue"
    sqs.delete_queue(QueueUrl=url)
    sqs.delete_queue(QueueUrl=std)


def test_group_order_blocking_and_sequence_numbers(sqs: Any) -> None:
    url = fifo_queue(sqs, "fifo-order")
    seqs = []
    for i, group in enumerate("ababa"):
        sent = sqs.send_message(
            QueueUrl=url,
            MessageBody=f"{group}{i}",
            MessageGroupId=group,
            MessageDeduplicationId=f"d{i}",
        )
        seqs.append(int(sent["SequenceNumber"]))
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    # As few groups as possible: group a's three first, in order.
    first = receive(sqs, url, 3, VisibilityTimeout=30)
    assert [m["Body"] for m in first] == ["a0", "a2", "a4"]
    assert [m["Attributes"]["MessageGroupId"] for m in first] == ["a", "a", "a"]
    assert [int(m["Attributes"]["SequenceNumber"]) for m in first] == seqs[0::2]
    assert first[1]["Attributes"]["MessageDeduplicationId"] == "d2"
    # Group a is blocked while in flight: only group b comes, then nothing.
    second = receive(sqs, url, 10, VisibilityTimeout=30)
    assert [m["Body"] for m in second] == ["b1", "b3"]
    assert receive(sqs, url, 10) == []
    # Deleting a's messages unblocks it; a new message of a comes next.
    sqs.send_message(
        QueueUrl=url, MessageBody="a5", MessageGroupId="a", MessageDeduplicationId="d5"
    )
    assert receive(sqs, url, 10) == []
    for m in first:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert [m["Body"] for m in receive(sqs, url, 10)] == ["a5"]
    sqs.delete_queue(QueueUrl=url)


def test_dedup_by_id_and_content(sqs: Any) -> None:
    url = fifo_queue(sqs, "fifo-dedup", ContentBasedDeduplication="true")
    one = sqs.send_message(
        QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="same"
    )
    two = sqs.send_message(
        QueueUrl=url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="same"
    )
    assert (two["MessageId"], two["SequenceNumber"]) == (one["MessageId"], one["SequenceNumber"])
    # Content-based: the same body without an id is the same message.
    three = sqs.send_message(QueueUrl=url, MessageBody="payload", MessageGroupId="g")
    four = sqs.send_message(QueueUrl=url, MessageBody="payload", MessageGroupId="h")
    assert four["MessageId"] == three["MessageId"]
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "payload", "MessageGroupId": "g"},
            {"Id": "b", "MessageBody": "fresh", "MessageGroupId": "g"},
        ],
    )
    ok = {e["Id"]: e for e in batch["Successful"]}
    assert ok["a"]["MessageId"] == three["MessageId"]
    assert int(ok["b"]["SequenceNumber"]) > int(three["SequenceNumber"])
    got = receive(sqs, url, 10)
    assert [m["Body"] for m in got] == ["x", "payload", "fresh"]
    digest = hashlib.sha256(b"payload").hexdigest()
    assert got[1]["Attributes"]["MessageDeduplicationId"] == digest
    sqs.delete_queue(QueueUrl=url)


def test_refused_fifo_parameters_store_nothing(sqs: Any) -> None:
    url = fifo_queue(sqs, "fifo-refused")
    cases = [
        ({"MessageBody": "x", "MessageDeduplicationId": "d"}, "MissingParameter"),
        ({"MessageBody": "x", "MessageGroupId": "g"}, "InvalidParameterValue"),  # no dedup id
        (
            {
                "MessageBody": "x",
                "MessageGroupId": "g",
                "MessageDeduplicationId": "d",
                "DelaySeconds": 5,
            },
            "InvalidParameterValue",
        ),
        (
            {"MessageBody": "x", "MessageGroupId": "g\u00e9", "MessageDeduplicationId": "d"},
            "InvalidParameterValue",
        ),
    ]
    for params, code in cases:
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=url, **params)
        assert code_of(e) == code, params
    # A batch with an entry lacking an id is refused as a whole (tests/sqs/test_current.py);
    # other refusals fail their entry alone.
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {
                "Id": "bad",
                "MessageBody": "x",
                "MessageGroupId": "g\u00e9",
                "MessageDeduplicationId": "d3",
            },
            {"Id": "ok", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d2"},
        ],
    )
    assert [e["Id"] for e in batch["Successful"]] == ["ok"]
    assert {e["Id"]: e["Code"] for e in batch["Failed"]} == {"bad": "InvalidParameterValue"}
    assert attributes(sqs, url, "ApproximateNumberOfMessages") == {
        "ApproximateNumberOfMessages": "1"
    }
    sqs.delete_queue(QueueUrl=url)


def test_receive_request_attempt_id_replays(sqs: Any) -> None:
    url = fifo_queue(sqs, "fifo-attempt", ContentBasedDeduplication="true")
    for body in ("m1", "m2"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
    first = receive(sqs, url, 10, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=30)
    again = receive(sqs, url, 10, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=30)
    assert [m["Body"] for m in first] == ["m1", "m2"]
    assert [m["ReceiptHandle"] for m in again] == [m["ReceiptHandle"] for m in first]
    assert receive(sqs, url, 10, ReceiveRequestAttemptId="attempt-2") == []
    sqs.delete_queue(QueueUrl=url)


def test_fifo_dead_letter_queue_and_redrive(sqs: Any) -> None:
    dlq = fifo_queue(sqs, "fifo-dlq")
    dlq_arn = attributes(sqs, dlq, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    src = fifo_queue(sqs, "fifo-src", ContentBasedDeduplication="true", RedrivePolicy=policy)
    sqs.send_message(QueueUrl=src, MessageBody="poison", MessageGroupId="g")
    sqs.send_message(QueueUrl=src, MessageBody="next", MessageGroupId="g")
    first = receive(sqs, src, 1, VisibilityTimeout=1)
    assert [m["Body"] for m in first] == ["poison"]
    # After its lease expires the poison message goes to the DLQ (it was received once) and
    # its group unblocks: "next" is delivered, never before "poison" left.
    delivered: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while not delivered and time.monotonic() < deadline:
        delivered = receive(sqs, src, 10, WaitTimeSeconds=1)
    assert [m["Body"] for m in delivered] == ["next"]
    sqs.delete_message(QueueUrl=src, ReceiptHandle=delivered[0]["ReceiptHandle"])
    moved = receive(sqs, dlq, 10, WaitTimeSeconds=5, VisibilityTimeout=1)
    assert [m["Body"] for m in moved] == ["poison"]
    assert moved[0]["Attributes"]["MessageGroupId"] == "g"
    # Redrive it back to the source (a message move task): it arrives with its group.
    sqs.change_message_visibility(
        QueueUrl=dlq, ReceiptHandle=moved[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    task = sqs.start_message_move_task(SourceArn=dlq_arn)
    assert task["TaskHandle"]
    back: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while not back and time.monotonic() < deadline:
        back = receive(sqs, src, 10, WaitTimeSeconds=1)
    assert [(m["Body"], m["Attributes"]["MessageGroupId"]) for m in back] == [("poison", "g")]
    for url in (src, dlq):
        sqs.delete_queue(QueueUrl=url)
