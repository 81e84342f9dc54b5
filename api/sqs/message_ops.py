"""The SQS message operations (send, receive, delete, change visibility; single and batch) on
`cmq.service.QueueService`; see `api.sqs.operations`. Pure but for the service calls.

Batches: the request is refused as a whole when it is empty, too long, or its entry ids are
malformed or repeated, and on a FIFO queue when an entry lacks its ``MessageGroupId``
(``MissingParameter``) or its ``MessageDeduplicationId`` without content-based deduplication
(``InvalidParameterValue``), as SQS refuses them; otherwise each entry is checked on its own,
refused entries are reported in ``Failed`` (``SenderFault``), and the others are done in one
service call.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from api.sqs import messages as msgs
from api.sqs.calls import Caller, Result, call, integer, queue_name, required
from api.sqs.errors import (
    BatchEntryIdsNotDistinct,
    BatchRequestTooLong,
    EmptyBatchRequest,
    InvalidBatchEntryId,
    InvalidParameterValue,
    MessageNotInflight,
    MissingParameter,
    ReceiptHandleIsInvalid,
    SqsError,
    TooManyEntriesInBatchRequest,
    from_cmq,
)
from api.sqs.md5 import AttributeValue, md5_of_attributes, md5_of_body
from cmq.errors import (
    LEASE_STALE,
    MESSAGE_NOT_INFLIGHT,
    RECEIPT_INVALID,
    CmqError,
    InvalidParameter,
    Unavailable,
)
from cmq.longpoll import sliced
from cmq.model import (
    EntryResult,
    OutgoingMessage,
    ReceivedMessage,
    SendRefused,
    check_fifo_id,
    is_fifo_name,
)
from cmq.tracecontext import xray_of

MAX_BATCH = 10
MAX_RECEIVE = 10
MAX_VISIBILITY = 43_200
MAX_DELAY = 900
MAX_WAIT = 20
POLL_SLICE = 5
"""Long polls wait in slices of at most this many seconds (`cmq.longpoll.sliced`), each one
service call, so a wait never outlives the cluster's request deadline on a forwarded call."""
_BATCH_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_NOT_FOR_THIS_TYPE = "The request include parameter that is not valid for this queue type."
_NO_DEDUP_ID = (
    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId "
    "provided explicitly"
)


@dataclass(frozen=True, slots=True)
class _Outgoing:
    """One checked message to send, with the checksums its answer carries."""

    message: OutgoingMessage
    answer: dict[str, str]
    size: int


def _fifo_id(p: dict[str, Any], key: str) -> str | None:
    value = p.get(key)
    if value is None:
        return None
    try:
        return check_fifo_id(value, key)
    except InvalidParameter:
        raise InvalidParameterValue(
            f"Value {value!r} for parameter {key} is invalid. Reason: it must be 1 to 128 "
            "alphanumeric or punctuation characters."
        ) from None


def _outgoing(c: Caller, p: dict[str, Any], fifo: bool) -> _Outgoing:
    """One message to send to a FIFO (``fifo``) or standard queue, checked."""
    group, dedup = _fifo_id(p, "MessageGroupId"), _fifo_id(p, "MessageDeduplicationId")
    body = msgs.check_body(p.get("MessageBody"))
    delay = integer(p, "DelaySeconds", 0, MAX_DELAY, None)
    if fifo and group is None:
        raise MissingParameter("The request must contain the parameter MessageGroupId.")
    if not fifo and dedup is not None:  # a group id names a standard queue's tenant (fair queues)
        raise InvalidParameterValue(
            f"Value for parameter MessageDeduplicationId is invalid. {_NOT_FOR_THIS_TYPE}"
        )
    if fifo and delay is not None:
        raise InvalidParameterValue(
            f"Value {delay} for parameter DelaySeconds is invalid. Reason: {_NOT_FOR_THIS_TYPE}"
        )
    attributes = msgs.parse_attributes(p.get("MessageAttributes"))
    system = msgs.parse_attributes(p.get("MessageSystemAttributes"), system=True)
    size = msgs.message_size(body, attributes)
    if size > msgs.MAX_MESSAGE_BYTES:
        raise InvalidParameterValue(
            f"One or more parameters are invalid. Reason: Message must be shorter than "
            f"{msgs.MAX_MESSAGE_BYTES} bytes."
        )
    trace = system.get("AWSTraceHeader")
    pairs = msgs.encode_attributes(
        attributes, c.sender_id, None if trace is None else trace.string_value
    )
    answer = {"MD5OfMessageBody": md5_of_body(body)}
    if (digest := md5_of_attributes(attributes)) is not None:
        answer["MD5OfMessageAttributes"] = digest
    if (digest := md5_of_attributes(system)) is not None:
        answer["MD5OfMessageSystemAttributes"] = digest
    message = OutgoingMessage(
        body.encode("utf-8"),
        delay_seconds=delay,
        attributes=pairs,
        dedup_id=dedup,
        group_id=group,
    )
    return _Outgoing(message, answer, size)


def _sent(fifo: bool, seq: int) -> dict[str, str]:
    """A FIFO send's answer carries the message's sequence number."""
    return {"SequenceNumber": str(seq)} if fifo else {}


async def send_message(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    fifo = is_fifo_name(name)
    out = _outgoing(c, p, fifo)
    (sent,) = await call(c.service.send(name, [out.message]))
    return {**out.answer, "MessageId": sent.id, **_sent(fifo, sent.seq)}


def _entries(p: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch's entries, checked as a whole (count, ids)."""
    entries = required(p, "Entries")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InvalidParameterValue("Entries must be a list of entries")
    if not entries:
        raise EmptyBatchRequest("There should be at least one entry in the request.")
    if len(entries) > MAX_BATCH:
        raise TooManyEntriesInBatchRequest(
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}."
        )
    ids = [e.get("Id") for e in entries]
    for entry_id in ids:
        if not isinstance(entry_id, str) or not _BATCH_ID.match(entry_id):
            raise InvalidBatchEntryId(
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long."
            )
    if len(set(ids)) != len(ids):
        raise BatchEntryIdsNotDistinct("Two or more batch entries in the request have the same Id.")
    return entries


def _failed(entry_id: str, error: SqsError) -> dict[str, Any]:
    return {
        "Id": entry_id,
        "SenderFault": error.sender_fault,
        "Code": error.code,
        "Message": error.message,
    }


async def send_message_batch(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    entries = _entries(p)
    checked: list[tuple[str, _Outgoing]] = []
    failed: list[dict[str, Any]] = []
    fifo = is_fifo_name(name)
    if fifo:
        await _check_fifo_batch(c, name, entries)
    for entry in entries:
        try:
            checked.append((entry["Id"], _outgoing(c, entry, fifo)))
        except SqsError as e:
            failed.append(_failed(entry["Id"], e))
    if sum(o.size for _, o in checked) > msgs.MAX_MESSAGE_BYTES:
        raise BatchRequestTooLong(
            f"Batch requests cannot be longer than {msgs.MAX_MESSAGE_BYTES} bytes."
        )
    successful: list[dict[str, Any]] = []
    if checked:
        # Each entry the queue refuses (too large for it, no deduplication id on a FIFO queue
        # without content-based deduplication) fails alone; the others are sent together.
        outcomes = await call(c.service.send_each(name, [o.message for _, o in checked]))
        for (entry_id, o), outcome in zip(checked, outcomes, strict=True):
            if isinstance(outcome, SendRefused):
                failed.append(_failed(entry_id, from_cmq(outcome.error())))
            else:
                sent = {"MessageId": outcome.id, **o.answer, **_sent(fifo, outcome.seq)}
                successful.append({"Id": entry_id, **sent})
    return {"Successful": successful, "Failed": failed}


async def _check_fifo_batch(c: Caller, name: str, entries: list[dict[str, Any]]) -> None:
    """A FIFO batch with an entry lacking its group id, or its deduplication id on a queue
    without content-based deduplication, is refused as a whole (as SQS refuses it): nothing is
    sent."""
    if any(e.get("MessageGroupId") is None for e in entries):
        raise MissingParameter("The request must contain the parameter MessageGroupId.")
    if all(e.get("MessageDeduplicationId") is not None for e in entries):
        return
    attributes, _ = await call(c.service.get_queue(name))
    if not attributes.content_based_deduplication:
        raise InvalidParameterValue(_NO_DEDUP_ID)


# -- receive -----------------------------------------------------------------------------------
async def receive_message(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    count = integer(p, "MaxNumberOfMessages", 1, MAX_RECEIVE, 1) or 1
    visibility = integer(p, "VisibilityTimeout", 0, MAX_VISIBILITY, None)
    wait = integer(p, "WaitTimeSeconds", 0, MAX_WAIT, None)
    system = msgs.system_names(p.get("AttributeNames"), p.get("MessageSystemAttributeNames"))
    wanted = p.get("MessageAttributeNames")
    msgs.select_attributes({}, wanted)  # checks the names before anything is leased
    attempt = _fifo_id(p, "ReceiveRequestAttemptId") if is_fifo_name(name) else None
    if wait is None:  # the queue's ReceiveMessageWaitTimeSeconds
        attributes, _ = await call(c.service.get_queue(name))
        wait = attributes.receive_wait_seconds

    async def poll(seconds: int) -> list[ReceivedMessage]:
        return await c.service.receive(name, count, visibility, seconds, attempt_id=attempt)

    try:
        received = await sliced(poll, wait, POLL_SLICE)  # long poll in slices (see POLL_SLICE)
    except Unavailable:
        # No leader reachable for the queue's group (a failover under way): nothing can be
        # leased, so the answer is an empty receive (a lease whose outcome is unknown only
        # delays its messages). A 5xx here would make some consumers stop polling the queue
        # (kombu's SQS transport does).
        received = []
    except CmqError as e:
        raise from_cmq(e) from None
    now = time.time_ns() // 1_000_000
    messages = [_render_message(m, system, wanted, now) for m in received]
    return {"Messages": messages} if messages else {}


def _render_message(
    m: ReceivedMessage, system: set[str], wanted: object, now: int
) -> dict[str, Any]:
    attributes, reserved = msgs.decode_attributes(m.attributes)
    selected: dict[str, AttributeValue] = msgs.select_attributes(attributes, wanted)
    body = m.body.decode("utf-8", "replace")
    out: dict[str, Any] = {
        "MessageId": m.id,
        "ReceiptHandle": m.receipt,
        "MD5OfBody": md5_of_body(body),
        "Body": body,
    }
    values = {
        "SenderId": reserved.get(msgs.SENDER_KEY),
        "SentTimestamp": str(m.sent_at_ms),
        "ApproximateReceiveCount": str(m.receive_count),
        "ApproximateFirstReceiveTimestamp": str(now) if m.receive_count == 1 else None,
        "AWSTraceHeader": xray_of(m.attributes),
        "MessageGroupId": m.group_id,
        "MessageDeduplicationId": m.dedup_id,
        "SequenceNumber": None if m.dedup_id is None else str(m.seq),  # FIFO queues only
    }
    found = {k: v for k, v in values.items() if k in system and v is not None}
    if found:
        out["Attributes"] = found
    if selected:
        out["MD5OfMessageAttributes"] = md5_of_attributes(selected)
        out["MessageAttributes"] = {k: msgs.render_attribute(v) for k, v in selected.items()}
    return out


# -- delete and visibility ----------------------------------------------------------------------
def _receipt(p: dict[str, Any]) -> str:
    receipt = p.get("ReceiptHandle")
    if receipt is None:
        raise MissingParameter("The request must contain the parameter ReceiptHandle.")
    if not isinstance(receipt, str) or not receipt:
        raise ReceiptHandleIsInvalid(f"The input receipt handle {receipt!r} is not valid.")
    return receipt


def _delete_error(result: EntryResult) -> SqsError | None:
    """An ack's outcome as DeleteMessage answers it: a stale receipt (the message was received
    again, or is already gone) succeeds without deleting, as in SQS."""
    if result.ok or result.error in (LEASE_STALE, MESSAGE_NOT_INFLIGHT):
        return None
    if result.error == RECEIPT_INVALID:
        return ReceiptHandleIsInvalid(f"The input receipt handle {result.receipt!r} is invalid.")
    return InvalidParameterValue(f"The message could not be deleted: {result.error}")


def _visibility_error(result: EntryResult) -> SqsError | None:
    if result.ok:
        return None
    if result.error == RECEIPT_INVALID:
        return ReceiptHandleIsInvalid(f"The input receipt handle {result.receipt!r} is invalid.")
    if result.error == MESSAGE_NOT_INFLIGHT:
        return MessageNotInflight("The message referred to isn't in flight.")
    return InvalidParameterValue(
        f"Value {result.receipt} for parameter ReceiptHandle is invalid. Reason: Message does "
        "not exist or is not available for visibility timeout change."
    )


async def delete_message(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    (result,) = await call(c.service.ack(name, [_receipt(p)]))
    if (error := _delete_error(result)) is not None:
        raise error
    return None


async def change_message_visibility(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    receipt = _receipt(p)
    timeout = integer(p, "VisibilityTimeout", 0, MAX_VISIBILITY, None)
    if timeout is None:
        raise MissingParameter("The request must contain the parameter VisibilityTimeout.")
    (result,) = await call(c.service.change_visibility(name, [(receipt, timeout)]))
    if (error := _visibility_error(result)) is not None:
        raise error
    return None


async def _batch(
    p: dict[str, Any],
    check: Callable[[dict[str, Any]], Any],
    run: Callable[[list[Any]], Any],
    error_of: Callable[[EntryResult], SqsError | None],
) -> Result:
    """A delete / visibility batch: ``check`` each entry (refused ones fail alone), ``run`` the
    checked ones in one service call, and report each result with ``error_of``."""
    entries = _entries(p)
    checked: list[tuple[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            checked.append((entry["Id"], check(entry)))
        except SqsError as e:
            failed.append(_failed(entry["Id"], e))
    successful: list[dict[str, Any]] = []
    if checked:
        results = await call(run([v for _, v in checked]))
        for (entry_id, _), result in zip(checked, results, strict=True):
            error = error_of(result)
            if error is None:
                successful.append({"Id": entry_id})
            else:
                failed.append(_failed(entry_id, error))
    return {"Successful": successful, "Failed": failed}


async def delete_message_batch(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    return await _batch(p, _receipt, lambda rs: c.service.ack(name, rs), _delete_error)


async def change_message_visibility_batch(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)

    def check(entry: dict[str, Any]) -> tuple[str, int]:
        timeout = integer(entry, "VisibilityTimeout", 0, MAX_VISIBILITY, None)
        if timeout is None:
            raise MissingParameter("The request must contain the parameter VisibilityTimeout.")
        return _receipt(entry), timeout

    return await _batch(
        p, check, lambda es: c.service.change_visibility(name, es), _visibility_error
    )
