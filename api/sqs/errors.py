"""SQS's errors: each carries the code the query protocol (and, through the
``x-amzn-query-error`` header, botocore's JSON parser) reports, the shape name the JSON protocol
puts in ``__type``, the HTTP status, and whether the sender is at fault. `from_cmq` translates
the queue's errors. Pure.
"""

from __future__ import annotations

from cmq.errors import (
    CmqError,
    DiskFull,
    InvalidParameter,
    InvalidQueueName,
    InvalidTraceContext,
    MessageTooLarge,
    Overloaded,
    QueueAlreadyExists,
    QueueNotFound,
    ReceiptInvalid,
    RequestTooLarge,
    TooManyEntries,
    Unavailable,
)

_PREFIX = "AWS.SimpleQueueService."


class SqsError(Exception):
    """An SQS error answer. ``code`` is the query protocol's code (botocore reports it as
    ``Error.Code`` in both protocols); ``shape`` the JSON protocol's ``__type`` name."""

    code = "InternalFailure"
    shape = "InternalFailure"
    status = 500
    sender_fault = False
    retry_after: float | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _error(name: str, code: str, status: int = 400, *, sender: bool = True) -> type[SqsError]:
    return type(
        name, (SqsError,), {"code": code, "shape": name, "status": status, "sender_fault": sender}
    )


QueueDoesNotExist = _error("QueueDoesNotExist", _PREFIX + "NonExistentQueue")
QueueNameExists = _error("QueueNameExists", "QueueAlreadyExists")
InvalidParameterValue = _error("InvalidParameterValue", "InvalidParameterValue")
MissingParameter = _error("MissingParameter", "MissingParameter")
InvalidAttributeName = _error("InvalidAttributeName", "InvalidAttributeName")
InvalidAttributeValue = _error("InvalidAttributeValue", "InvalidAttributeValue")
InvalidMessageContents = _error("InvalidMessageContents", "InvalidMessageContents")
ReceiptHandleIsInvalid = _error("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid")
MessageNotInflight = _error("MessageNotInflight", _PREFIX + "MessageNotInflight")
TooManyEntriesInBatchRequest = _error(
    "TooManyEntriesInBatchRequest", _PREFIX + "TooManyEntriesInBatchRequest"
)
EmptyBatchRequest = _error("EmptyBatchRequest", _PREFIX + "EmptyBatchRequest")
BatchEntryIdsNotDistinct = _error("BatchEntryIdsNotDistinct", _PREFIX + "BatchEntryIdsNotDistinct")
InvalidBatchEntryId = _error("InvalidBatchEntryId", _PREFIX + "InvalidBatchEntryId")
BatchRequestTooLong = _error("BatchRequestTooLong", _PREFIX + "BatchRequestTooLong")
UnsupportedOperation = _error("UnsupportedOperation", _PREFIX + "UnsupportedOperation")
ResourceNotFound = _error("ResourceNotFoundException", "ResourceNotFoundException", 404)
InvalidAction = _error("InvalidAction", "InvalidAction")
UnknownOperation = _error("UnknownOperationException", "UnknownOperationException")
MalformedQueryString = _error("MalformedQueryString", "MalformedQueryString")
SerializationError = _error("SerializationException", "SerializationException")
RequestEntityTooLarge = _error("RequestEntityTooLarge", "RequestEntityTooLarge", 413)
ServiceUnavailable = _error("ServiceUnavailable", "ServiceUnavailable", 503, sender=False)
InternalFailure = _error("InternalFailure", "InternalFailure", 500, sender=False)


def from_cmq(error: CmqError) -> SqsError:
    """The SQS error answering the queue's ``error``."""
    out: SqsError
    match error:
        case QueueNotFound():
            out = QueueDoesNotExist("The specified queue does not exist.")
        case QueueAlreadyExists():
            out = QueueNameExists(
                "A queue already exists with the same name and a different value for an attribute."
            )
        case MessageTooLarge():
            out = InvalidParameterValue(f"One or more parameters are invalid. Reason: {error}")
        case RequestTooLarge():
            out = RequestEntityTooLarge(error.message)
        case ReceiptInvalid():
            out = ReceiptHandleIsInvalid(f"The input receipt handle is invalid. {error.message}")
        case TooManyEntries():
            out = TooManyEntriesInBatchRequest(error.message)
        case InvalidTraceContext():
            # SQS has no such code: the queue's own code leads the text (machine-readable).
            out = InvalidParameterValue(f"{error.code}: {error.message}")
        case InvalidQueueName() | InvalidParameter():
            out = InvalidParameterValue(error.message)
        case DiskFull():
            # SQS has no "disk full": a 503 ServiceUnavailable is what its clients know as "the
            # service cannot take this now" (SDKs back off and retry it); the code is in the text.
            out = ServiceUnavailable(f"{error.code}: {error.message}")
            out.retry_after = 5.0
        case Unavailable() | Overloaded():
            out = ServiceUnavailable(f"{error.code}: {error.message}")
            out.retry_after = error.retry_after
        case _:
            out = InternalFailure("The request processing has failed because of an internal error.")
    return out
