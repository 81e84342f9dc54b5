"""ReceiveMessage's long poll in slices of `POLL_SLICE` (`cmq.longpoll.sliced`), on a scripted
test double of the queue service that answers at once: the waits each slice was given, the
first non-empty slice answering, ``Unavailable`` ending the poll with an empty answer, and the
other errors translated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from api.sqs.calls import Caller
from api.sqs.errors import QueueDoesNotExist, SqsError
from api.sqs.message_ops import POLL_SLICE, receive_message
from api.sqs.queues import SqsSettings
from cmq.errors import CmqError, QueueNotFound, Unavailable
from cmq.model import QueueAttributes, ReceivedMessage
from tests.api.recording import RecordingService

URL = "http://h:1/000000000000/alpha"


def _message(seq: int) -> ReceivedMessage:
    return ReceivedMessage(f"id-{seq}", seq, b"x", False, f"r-{seq}", 1, 1_700_000_000_000, ())


@dataclass
class SlicedService(RecordingService):
    """Each receive answers the next of ``script`` (then ``[]``), or raises it."""

    script: list[list[ReceivedMessage] | CmqError] = field(default_factory=list)

    async def receive(self, *_: Any, **__: Any) -> list[ReceivedMessage]:
        answer = self.script.pop(0) if self.script else []
        if isinstance(answer, CmqError):
            raise answer
        return answer

    def waits(self) -> list[Any]:
        return [c.args[3] for c in self.calls if c.method == "receive"]


async def _receive(service: SlicedService, **params: Any) -> Any:
    caller = Caller(service, SqsSettings(), "http://h:1", "AKID")
    return await receive_message(caller, {"QueueUrl": URL, **params})


@pytest.mark.parametrize(
    ("wait", "waits"),
    [(20, [5, 5, 5, 5]), (12, [5, 5, 2]), (3, [3]), (0, [0])],
)
async def test_the_wait_goes_in_slices_of_poll_slice(wait: int, waits: list[int]) -> None:
    assert POLL_SLICE == 5
    service = SlicedService()
    assert await _receive(service, WaitTimeSeconds=wait) == {}
    assert service.waits() == waits


async def test_the_queues_default_wait_is_sliced_too() -> None:
    service = SlicedService(attributes=QueueAttributes(receive_wait_seconds=7))
    assert await _receive(service) == {}
    assert service.waits() == [5, 2]


async def test_the_first_slice_that_leases_answers() -> None:
    service = SlicedService(script=[[], [_message(1), _message(2)]])
    got = await _receive(service, WaitTimeSeconds=20, MaxNumberOfMessages=10)
    assert [m["MessageId"] for m in got["Messages"]] == ["id-1", "id-2"]
    assert service.waits() == [5, 5]


async def test_unavailable_ends_the_poll_with_an_empty_answer() -> None:
    service = SlicedService(script=[[], Unavailable("no leader for group 3")])
    assert await _receive(service, WaitTimeSeconds=20) == {}
    assert service.waits() == [5, 5]  # no slice after the failover's refusal


async def test_other_errors_are_translated() -> None:
    service = SlicedService(script=[[], QueueNotFound("alpha")])
    with pytest.raises(SqsError) as caught:
        await _receive(service, WaitTimeSeconds=20)
    assert isinstance(caught.value, QueueDoesNotExist)
    assert service.waits() == [5, 5]
