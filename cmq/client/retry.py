"""When `cmq.client` may try a request again. Pure: no I/O, no clock; the randomness of the
jitter is passed in. Callers with their own retry loop (``cmq bench``) use the same rules.

A failed attempt is one of (`failure_of`):

* ``NOT_SENT``: the connection could not be opened; nothing reached the server;
* ``REFUSED``: the server answered that it did not process the request (503 ``Overloaded`` or
  ``Unavailable``, 429): nothing changed;
* ``UNKNOWN``: the request reached (or may have reached) the server and its fate is unknown
  (a timeout, a dropped connection, 503 ``OutcomeUnknown``, another 5xx);
* ``DEFINITE``: a definite answer (a 4xx, a 500): never retried.

What an operation allows:

* ``IDEMPOTENT`` (reads, queue creation, attribute changes, ack / visibility / nack, whose
  results are per entry, and sends whose messages all carry a ``dedup_id``): retried after
  ``NOT_SENT``, ``REFUSED`` and ``UNKNOWN``;
* ``ONCE`` (receives: a lost answer leaves messages leased; sends without dedup ids: a resend
  could store them twice; queue deletion and purge): retried only after ``NOT_SENT`` and
  ``REFUSED``, never once the request may have been processed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cmq.client.errors import ConnectFailed, ResponseLost, ServerError
from cmq.errors import CmqError


class Failure(enum.Enum):
    NOT_SENT = "not_sent"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    DEFINITE = "definite"


class Safety(enum.Enum):
    IDEMPOTENT = "idempotent"
    ONCE = "once"


_REFUSED_CODES = frozenset({"Overloaded", "Unavailable"})


def classify_answer(status: int, code: str) -> Failure:
    """How an error answer (``status`` ≥ 400, the server's ``code``) counts."""
    if status == 429 or (status == 503 and code in _REFUSED_CODES):
        return Failure.REFUSED
    if status >= 500 and status != 500:
        return Failure.UNKNOWN
    return Failure.DEFINITE


def failure_of(error: CmqError) -> Failure:
    """How a failed call's error counts (an error raised by the client before any request is
    ``DEFINITE``)."""
    if isinstance(error, ConnectFailed):
        return Failure.NOT_SENT
    if isinstance(error, ResponseLost):
        return Failure.UNKNOWN
    if isinstance(error, ServerError):
        return classify_answer(error.status, error.code)
    return Failure.DEFINITE


def retry_after_of(error: CmqError) -> float | None:
    """The ``Retry-After`` the server sent with ``error`` (None for other errors)."""
    return error.retry_after if isinstance(error, ServerError) else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a request gets and how long to wait between them.

    The wait before attempt ``n + 1`` is the answer's ``Retry-After`` if it had one, else
    ``base_delay * 2**(n-1)``; at most ``max_delay``, jittered down by up to half. A request
    that could not connect is sent to the next node at once while some node of the client was
    not tried yet in this call.
    """

    attempts: int = 4
    """Attempts per call, the first included (1: never retry)."""
    base_delay: float = 0.05
    max_delay: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("attempts must be ≥ 1 and delays ≥ 0")

    def should_retry(self, failure: Failure, safety: Safety, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based), which failed with ``failure``, may be
        followed by another for an operation of ``safety``."""
        if attempt >= self.attempts or failure is Failure.DEFINITE:
            return False
        if failure is Failure.UNKNOWN:
            return safety is Safety.IDEMPOTENT
        return True

    def delay(
        self,
        failure: Failure,
        attempt: int,
        retry_after: float | None,
        untried_nodes: bool,
        jitter: float,
    ) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based); ``jitter`` in [0, 1)."""
        if failure is Failure.NOT_SENT and untried_nodes:
            return 0.0
        wait = retry_after if retry_after is not None else self.base_delay * 2 ** (attempt - 1)
        return min(wait, self.max_delay) * (1.0 - jitter / 2)


NO_RETRY = RetryPolicy(attempts=1)
"""One attempt per call: the caller sees every failure (e.g. a history-recording test client)."""
