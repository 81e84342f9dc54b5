"""What every SQS operation shares: the caller's context and the checks of common parameters.
Pure.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from api.sqs.errors import InvalidParameterValue, MissingParameter, from_cmq
from api.sqs.queues import SqsSettings
from cmq.errors import CmqError
from cmq.service import QueueService

if TYPE_CHECKING:
    from api.sqs.moves import MoveTasks

MAX_LIST = 1000

Result = dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Caller:
    """One request's context: the service, the surface's settings, the base URL the client
    called (``http://host:port``, for the queue URLs answered), the sender's id, and this
    node's message move tasks."""

    service: QueueService
    settings: SqsSettings
    base_url: str
    sender_id: str
    moves: MoveTasks | None = None

    def url(self, name: str) -> str:
        return self.settings.url(self.base_url, name)


Operation = Callable[[Caller, dict[str, Any]], Awaitable[Result]]


# -- parameters --------------------------------------------------------------------------------
def required(p: dict[str, Any], key: str) -> Any:
    value = p.get(key)
    if value is None:
        raise MissingParameter(f"The request must contain the parameter {key}.")
    return value


def integer(p: dict[str, Any], key: str, lo: int, hi: int, default: int | None) -> int | None:
    value = p.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidParameterValue(
            f"Value {value} for parameter {key} is invalid. Reason: must be between {lo} and "
            f"{hi}, if provided."
        )
    return value


def queue_name(c: Caller, p: dict[str, Any]) -> str:
    return c.settings.name_of_url(required(p, "QueueUrl"))


async def call(awaitable: Awaitable[Any]) -> Any:
    try:
        return await awaitable
    except CmqError as e:
        raise from_cmq(e) from None


def now_s() -> str:
    return str(int(time.time()))


def page(items: list[str], p: dict[str, Any]) -> tuple[list[str], str | None]:
    """``items`` from ``NextToken`` on, at most ``MaxResults`` (then a token for the rest)."""
    limit = integer(p, "MaxResults", 1, MAX_LIST, None)
    token = p.get("NextToken")
    if token is not None:
        if limit is None:
            raise InvalidParameterValue("NextToken needs MaxResults.")
        try:
            after = base64.urlsafe_b64decode(str(token).encode()).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise InvalidParameterValue("Invalid NextToken value.") from None
        items = [i for i in items if i > after]
    if limit is None or len(items) <= limit:
        return items[:MAX_LIST], None
    page = items[:limit]
    return page, base64.urlsafe_b64encode(page[-1].encode()).decode()
