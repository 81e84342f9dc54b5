"""boto3 against a real 3-node cluster, through both SQS protocols: sends, receives (long polls,
visibility, attributes, checksums), deletes and visibility changes, single and batched, with
their partial failures. Every answer's checksums are verified by the clients
(`tests.sqs.helpers.verify_checksums`): a wrong MD5 fails the test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cmq.cluster import unique_queue
from tests.sqs.helpers import attributes, code_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TYPED = {
    "text": {"DataType": "String", "StringValue": "héllo wörld ✓"},
    "count": {"DataType": "Number", "StringValue": "-12.5e3"},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "label": {"DataType": "String.custom", "StringValue": "x"},
    "id": {"DataType": "Number.int", "StringValue": "42"},
    "raw": {"DataType": "Binary.gz", "BinaryValue": b"\x1f\x8b\x00"},
}

EMPTY = {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}
"""The counts of a queue with nothing visible and nothing in flight."""


@pytest.fixture
def queue(sqs: Any) -> Iterator[str]:
    url: str = sqs.create_queue(
        QueueName=unique_queue("sqs-msg"), Attributes={"VisibilityTimeout": "30"}
    )["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


def test_send_receive_delete_with_typed_attributes(sqs: Any, node1: Any, queue: str) -> None:
    body = 'line one\r\nline two\t<tag attr="&amp;">💡\u00e9'
    sent = sqs.send_message(QueueUrl=queue, MessageBody=body, MessageAttributes=TYPED)
    assert sent["MD5OfMessageAttributes"]  # checked against what was sent by the client hook
    before = time.time() * 1000
    got = sqs.receive_message(
        QueueUrl=queue,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
        WaitTimeSeconds=2,
    )
    (m,) = got["Messages"]
    assert m["MessageId"] == sent["MessageId"]
    assert m["Body"] == body
    assert m["MessageAttributes"] == TYPED
    system = m["Attributes"]
    assert system["ApproximateReceiveCount"] == "1"
    assert system["SenderId"] == "AKIDCMQTEST"
    assert abs(int(system["SentTimestamp"]) - before) < 60_000
    assert int(system["ApproximateFirstReceiveTimestamp"]) >= int(system["SentTimestamp"])
    # In flight now: invisible to another node's client.
    assert "Messages" not in node1.receive_message(
        QueueUrl=node1.get_queue_url(QueueName=queue.rsplit("/", 1)[1])["QueueUrl"]
    )
    assert attributes(sqs, queue, "ApproximateNumberOfMessagesNotVisible") == {
        "ApproximateNumberOfMessagesNotVisible": "1"
    }
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
    # Deleting again with the same (now stale) receipt succeeds, as in SQS.
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
    assert attributes(sqs, queue, *EMPTY) == EMPTY


def test_attribute_selection(sqs: Any, queue: str) -> None:
    sqs.send_message(QueueUrl=queue, MessageBody="a", MessageAttributes=TYPED)
    got = sqs.receive_message(
        QueueUrl=queue, MessageAttributeNames=["text", "bl.*", "absent"], VisibilityTimeout=0
    )
    (m,) = got["Messages"]
    assert set(m["MessageAttributes"]) == {"text"}  # "bl.*" is a prefix "bl." : no match
    got = sqs.receive_message(
        QueueUrl=queue, MessageAttributeNames=["la.*", "count"], VisibilityTimeout=0
    )
    (m,) = got["Messages"]
    assert set(m["MessageAttributes"]) == {"count"}
    got = sqs.receive_message(QueueUrl=queue, AttributeNames=["SentTimestamp"])
    (m,) = got["Messages"]
    assert set(m["Attributes"]) == {"SentTimestamp"}
    assert "MessageAttributes" not in m and "MD5OfMessageAttributes" not in m
    assert m["Attributes"]  # and ApproximateReceiveCount counted the earlier receives:
    again = sqs.receive_message(QueueUrl=queue, AttributeNames=["All"], VisibilityTimeout=0)
    assert "Messages" not in again  # leased for 30 s by the receive above


def test_refused_sends_store_nothing(sqs: Any, queue: str) -> None:
    cases = [
        ({"MessageBody": ""}, "InvalidParameterValue"),
        ({"MessageBody": "bad \u0001 char"}, "InvalidMessageContents"),
        ({"MessageBody": "x", "DelaySeconds": 901}, "InvalidParameterValue"),
        ({"MessageBody": "x" * 1_048_577}, "InvalidParameterValue"),
        (
            {"MessageBody": "x", "MessageAttributes": {"AWS.x": TYPED["text"]}},
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "ten"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"n": {"DataType": "Float", "StringValue": "1"}},
            },
            "InvalidParameterValue",
        ),
        (
            {"MessageBody": "x", "MessageAttributes": {f"a{i}": TYPED["text"] for i in range(11)}},
            "InvalidParameterValue",
        ),
        (
            {"MessageBody": "x", "MessageDeduplicationId": "d"},
            "InvalidParameterValue",  # a FIFO parameter on a standard queue
        ),
    ]
    for params, code in cases:
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=queue, **params)
        assert code_of(e) == code, params
    assert attributes(sqs, queue, "ApproximateNumberOfMessages") == {
        "ApproximateNumberOfMessages": "0"
    }


def test_send_batch_partial_failure(sqs: Any, queue: str) -> None:
    entries = [
        {"Id": "ok-1", "MessageBody": "one", "MessageAttributes": {"k": TYPED["count"]}},
        {"Id": "empty", "MessageBody": ""},
        {"Id": "ok_2", "MessageBody": "two", "DelaySeconds": 0},
        {"Id": "bad-attr", "MessageBody": "x", "MessageAttributes": {"Amazon.k": TYPED["text"]}},
        {"Id": "big", "MessageBody": "y" * 1_048_577},
    ]
    out = sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert sorted(s["Id"] for s in out["Successful"]) == ["ok-1", "ok_2"]
    failed = {f["Id"]: f for f in out["Failed"]}
    assert set(failed) == {"empty", "bad-attr", "big"}
    assert all(f["SenderFault"] and f["Code"] == "InvalidParameterValue" for f in failed.values())
    bodies = []
    for _ in range(5):
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        bodies += [m["Body"] for m in got.get("Messages", [])]
        if len(bodies) == 2:
            break
    assert sorted(bodies) == ["one", "two"]

    for bad, code in [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": f"e{i}", "MessageBody": "m"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            [{"Id": "same", "MessageBody": "a"}, {"Id": "same", "MessageBody": "b"}],
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        ([{"Id": "not valid!", "MessageBody": "a"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ]:
        with pytest.raises(ClientError) as e:
            sqs.send_message_batch(QueueUrl=queue, Entries=bad)
        assert code_of(e) == code
    assert attributes(sqs, queue, "ApproximateNumberOfMessages") == {
        "ApproximateNumberOfMessages": "0"
    }


def test_receive_many_delete_and_change_visibility_batches(sqs: Any, queue: str) -> None:
    sqs.send_message_batch(
        QueueUrl=queue, Entries=[{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(10)]
    )
    received: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    while len(received) < 10 and time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        received += got.get("Messages", [])
    assert sorted(m["Body"] for m in received) == sorted(f"body {i}" for i in range(10))
    with pytest.raises(ClientError) as e:
        sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=11)
    assert code_of(e) == "InvalidParameterValue"

    # Three messages back at once (visibility 0), one with a forged receipt, one unchanged.
    changes = [
        {"Id": f"c{i}", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
        for i, m in enumerate(received[:3])
    ]
    changes.append({"Id": "forged", "ReceiptHandle": "AAAA-not-a-receipt", "VisibilityTimeout": 0})
    out = sqs.change_message_visibility_batch(QueueUrl=queue, Entries=changes)
    assert sorted(s["Id"] for s in out["Successful"]) == ["c0", "c1", "c2"]
    (failed,) = out["Failed"]
    assert failed["Id"] == "forged" and failed["Code"] == "ReceiptHandleIsInvalid"
    back: list[dict[str, Any]] = []
    while len(back) < 3 and time.monotonic() < deadline:
        back += sqs.receive_message(
            QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"]
        ).get("Messages", [])
    assert sorted(m["Body"] for m in back) == sorted(m["Body"] for m in received[:3])
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in back} == {"2"}

    # Delete everything: the first three by their new receipts, plus a forged and a stale one.
    current = back + received[3:]
    deletes = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(current)]
    out = sqs.delete_message_batch(QueueUrl=queue, Entries=deletes)
    assert len(out["Successful"]) == 10 and not out.get("Failed")
    out = sqs.delete_message_batch(
        QueueUrl=queue,
        Entries=[
            {"Id": "stale", "ReceiptHandle": received[0]["ReceiptHandle"]},
            {"Id": "forged", "ReceiptHandle": "bogus"},
        ],
    )
    assert [s["Id"] for s in out["Successful"]] == ["stale"]
    assert [(f["Id"], f["Code"]) for f in out["Failed"]] == [("forged", "ReceiptHandleIsInvalid")]
    with pytest.raises(ClientError) as e:
        sqs.delete_message(QueueUrl=queue, ReceiptHandle="bogus")
    assert code_of(e) == "ReceiptHandleIsInvalid"
    assert attributes(sqs, queue, *EMPTY) == EMPTY


def test_visibility_timeout_effects(sqs: Any, queue: str) -> None:
    sqs.send_message(QueueUrl=queue, MessageBody="v")
    (m,) = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=1, WaitTimeSeconds=2)["Messages"]
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    time.sleep(1.2)
    (again,) = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=2, AttributeNames=["All"])[
        "Messages"
    ]
    assert again["MessageId"] == m["MessageId"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert "ApproximateFirstReceiveTimestamp" not in again["Attributes"]
    # The older receipt no longer holds the lease.
    with pytest.raises(ClientError) as e:
        sqs.change_message_visibility(
            QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=5
        )
    assert code_of(e) in ("InvalidParameterValue", "AWS.SimpleQueueService.MessageNotInflight")
    sqs.change_message_visibility(
        QueueUrl=queue, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=0
    )
    (third,) = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=2)["Messages"]
    assert third["MessageId"] == m["MessageId"]
    with pytest.raises(ClientError) as e:
        sqs.change_message_visibility(
            QueueUrl=queue, ReceiptHandle=third["ReceiptHandle"], VisibilityTimeout=43_201
        )
    assert code_of(e) == "InvalidParameterValue"
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=third["ReceiptHandle"])


def test_delay_seconds(sqs: Any, queue: str) -> None:
    sqs.send_message(QueueUrl=queue, MessageBody="later", DelaySeconds=2)
    assert attributes(sqs, queue, "ApproximateNumberOfMessagesDelayed") == {
        "ApproximateNumberOfMessagesDelayed": "1"
    }
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    started = time.monotonic()
    (m,) = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=10)["Messages"]
    assert m["Body"] == "later"
    assert time.monotonic() - started < 5


def test_long_polling(sqs: Any, queue: str) -> None:
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1)
    assert time.monotonic() - started >= 0.9

    def send_later() -> None:
        time.sleep(1.0)
        sqs.send_message(QueueUrl=queue, MessageBody="woken")

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    try:
        got = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=8)
    finally:
        sender.join()
    elapsed = time.monotonic() - started
    assert [m["Body"] for m in got["Messages"]] == ["woken"]
    assert 0.9 <= elapsed < 6, elapsed  # answered when the message came, not at the end

    # The queue's ReceiveMessageWaitTimeSeconds is the default wait.
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"ReceiveMessageWaitTimeSeconds": "1"})
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    assert time.monotonic() - started >= 0.9
