"""ReceiveMessage while the queue's group has no reachable leader (what the Celery test's
leader kill provokes): an empty receive, never a 5xx, which makes kombu's SQS transport stop
polling the queue (its receive callback takes the empty list it substitutes for a 5xx for a
response and fails). Other errors keep their SQS codes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from api.sqs.calls import Caller
from api.sqs.errors import SqsError
from api.sqs.message_ops import receive_message
from api.sqs.moves import MoveTasks
from api.sqs.queues import SqsSettings
from cmq.errors import CmqError, OutcomeUnknown, QueueNotFound, Unavailable
from cmq.model import ReceivedMessage
from tests.sqs.helpers import MetadataService


@dataclass
class Failing(MetadataService):
    """Receives fail with ``error``."""

    error: CmqError = field(default_factory=lambda: Unavailable("no leader"))

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait: int | None,
        *,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        raise self.error


def _receive(service: MetadataService) -> dict[str, object]:
    caller = Caller(service, SqsSettings(), "http://h:1", "AKID", MoveTasks(service, SqsSettings()))
    params = {"QueueUrl": "http://h:1/000000000000/q", "WaitTimeSeconds": 2}
    return asyncio.run(receive_message(caller, params))


@pytest.mark.parametrize("error", [Unavailable("no leader"), OutcomeUnknown("peer lost")])
def test_no_leader_is_an_empty_receive(error: CmqError) -> None:
    service = Failing(error=error)
    assert _receive(service) == {}
    assert [c.method for c in service.calls] == ["receive"]  # no retry loop against a failover


def test_other_errors_keep_their_sqs_code() -> None:
    with pytest.raises(SqsError) as refused:
        _receive(Failing(error=QueueNotFound("q")))
    assert refused.value.code == "AWS.SimpleQueueService.NonExistentQueue"
