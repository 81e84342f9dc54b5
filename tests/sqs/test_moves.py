"""Message move tasks: through both protocols on a real 3-node cluster (a dead-letter queue
redriven to its source with attributes intact, an explicit destination, a rate-limited task
cancelled midway, refusals), and, against a recording test double, a task whose node stopped
being resumed by the next node that asks about it."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import orjson
import pytest
from botocore.exceptions import ClientError

from api.sqs import moves
from api.sqs.calls import Caller
from api.sqs.queues import SqsSettings
from tests.cmq.cluster import unique_queue
from tests.sqs.helpers import MetadataService, attributes, code_of

ATTRS = {"k": {"DataType": "Number.id", "StringValue": "5"}}


def wait_task(sqs: Any, arn: str, done: set[str], timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        (task,) = sqs.list_message_move_tasks(SourceArn=arn)["Results"]
        if task["Status"] in done or time.monotonic() > deadline:
            return dict(task)
        time.sleep(0.2)


def drain(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message of ``url`` (until a 1-second long poll finds none)."""
    got: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not batch:
            return got
        got += batch


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_move_tasks(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName=unique_queue("sqs-mv-dlq"))["QueueUrl"]
    dlq_arn = attributes(sqs, dlq, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})
    src = sqs.create_queue(
        QueueName=unique_queue("sqs-mv-src"), Attributes={"RedrivePolicy": policy}
    )["QueueUrl"]
    other = sqs.create_queue(QueueName=unique_queue("sqs-mv-other"))["QueueUrl"]
    other_arn = attributes(sqs, other, "QueueArn")["QueueArn"]
    try:
        # Not a dead-letter queue; unknown handles.
        with pytest.raises(ClientError) as e:
            sqs.start_message_move_task(SourceArn=other_arn)
        assert code_of(e) == "InvalidParameterValue"
        with pytest.raises(ClientError) as e:
            sqs.cancel_message_move_task(TaskHandle="bm8tc3VjaC90YXNr")
        assert code_of(e) == "ResourceNotFoundException"
        assert sqs.list_message_move_tasks(SourceArn=dlq_arn).get("Results", []) == []

        # Back to the source (the one queue naming the DLQ), attributes intact.
        sqs.send_message_batch(
            QueueUrl=dlq,
            Entries=[
                {"Id": f"m{i}", "MessageBody": f"dead {i}", "MessageAttributes": ATTRS}
                for i in range(3)
            ],
        )
        handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
        assert handle
        task = wait_task(sqs, dlq_arn, {"COMPLETED", "FAILED"})
        assert task["Status"] == "COMPLETED", task
        assert task["ApproximateNumberOfMessagesMoved"] == 3
        assert task["ApproximateNumberOfMessagesToMove"] == 3
        assert task["DestinationArn"] == attributes(sqs, src, "QueueArn")["QueueArn"]
        moved = drain(sqs, src)
        assert sorted(m["Body"] for m in moved) == [f"dead {i}" for i in range(3)]
        assert all(m["MessageAttributes"] == ATTRS for m in moved)
        assert "Messages" not in sqs.receive_message(QueueUrl=dlq)

        # A slow task to an explicit destination, cancelled midway.
        sqs.send_message_batch(
            QueueUrl=dlq, Entries=[{"Id": f"s{i}", "MessageBody": f"slow {i}"} for i in range(10)]
        )
        handle = sqs.start_message_move_task(
            SourceArn=dlq_arn, DestinationArn=other_arn, MaxNumberOfMessagesPerSecond=1
        )["TaskHandle"]
        with pytest.raises(ClientError) as e:
            sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=other_arn)
        assert code_of(e) == "InvalidParameterValue"  # one task per queue at a time
        sqs.cancel_message_move_task(TaskHandle=handle)
        task = wait_task(sqs, dlq_arn, {"CANCELLED", "COMPLETED", "FAILED"})
        assert task["Status"] == "CANCELLED", task
        assert task["ApproximateNumberOfMessagesMoved"] < 10
        with pytest.raises(ClientError) as e:
            sqs.cancel_message_move_task(TaskHandle=handle)
        assert code_of(e) == "ResourceNotFoundException"
        # Nothing lost: what was not moved is still in the DLQ.
        bodies = [m["Body"] for m in drain(sqs, other) + drain(sqs, dlq)]
        assert sorted(bodies) == sorted(f"slow {i}" for i in range(10))
    finally:
        for url in (src, dlq, other):
            sqs.delete_queue(QueueUrl=url)


def test_a_task_whose_node_stopped_is_resumed() -> None:
    service = MetadataService(queues=["alpha"])
    settings = SqsSettings()
    record = {
        "TaskId": "t1",
        "TaskHandle": "h",
        "Status": "RUNNING",
        "SourceArn": settings.arn("alpha"),
        "DestinationArn": settings.arn("beta"),
        "ApproximateNumberOfMessagesMoved": 4,
        "ApproximateNumberOfMessagesToMove": 9,
        "StartedTimestamp": 1,
        "owner": "a node that stopped",
        "beat": 1,
    }
    service.meta = {moves.RECORD: orjson.dumps(record).decode()}

    async def run() -> list[Any]:
        tasks = moves.MoveTasks(service, settings)
        caller = Caller(service, settings, "http://h:1", "AKID", tasks)
        listed = await moves.list_message_move_tasks(caller, {"SourceArn": settings.arn("alpha")})
        for _ in range(100):  # the resumed mover finds the (double's) source empty
            if not tasks._movers:
                break
            await asyncio.sleep(0.01)
        await tasks.close()
        return [listed]

    (listed,) = asyncio.run(run())
    assert listed["Results"][0]["Status"] == "RUNNING"
    writes = [c.args[1] for c in service.calls if c.method == "update_metadata"]
    claimed = orjson.loads(writes[0][moves.RECORD])
    assert claimed["owner"] != "a node that stopped" and claimed["beat"] > 1
    assert [c.method for c in service.calls].count("receive") == 1
    final = orjson.loads(writes[-1][moves.RECORD])
    assert final["Status"] == "COMPLETED"
    assert final["ApproximateNumberOfMessagesMoved"] == 4
