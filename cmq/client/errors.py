"""Errors raised by `cmq.client`: the server's errors mapped back to `cmq.errors` classes, and
the transport's own failures.

An error answer ``{"error": {"code", "message"}}`` is raised as the `cmq.errors` class of that
code (``except QueueNotFound`` works), made an instance of `ServerError` as well so the HTTP
status, the server's exact code and its ``Retry-After`` are at hand. A code this client does not
know is raised as a plain `ServerError`.

Transport failures are `ConnectFailed` (the connection could not be opened: the request was
certainly not sent) and `ResponseLost` (it was, or may have been, sent, but no answer came back:
a timeout or a dropped connection; it may or may not have taken effect). `UNKNOWN_OUTCOME` is
the pair of errors after which a change may or may not be stored.
"""

from __future__ import annotations

from typing import cast

from cmq.errors import (
    BY_CODE,
    CmqError,
    InvalidParameter,
    OutcomeUnknown,
)


class ServerError(CmqError):
    """An error answered by the server. Raised instances are also instances of the
    `cmq.errors` class of their code (see `server_error`)."""

    status: int
    """The HTTP status of the answer."""

    def __init__(
        self, message: str, *, status: int, code: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after
        """``Retry-After`` of the answer in seconds, when it had one."""


class TransportError(CmqError):
    """No HTTP answer: see `ConnectFailed` and `ResponseLost`."""

    code = "TransportError"

    def __init__(self, message: str, url: str, reason: str) -> None:
        super().__init__(message)
        self.url = url
        """The node the request was for."""
        self.reason = reason
        """``timeout``, or the name of the aiohttp error (``ClientConnectorError``, ...)."""


class ConnectFailed(TransportError):
    """The connection to the node could not be opened: the request was not sent."""

    code = "ConnectFailed"


class ResponseLost(TransportError):
    """The request was (or may have been) sent but no answer came back (timeout, dropped
    connection): it may or may not have taken effect."""

    code = "ResponseLost"


class SendManyError(CmqError):
    """`send_many` stopped at a failed chunk: ``sent`` holds the confirmations of the chunks
    before it (in order), ``cause`` the chunk's error; later chunks were not sent."""

    code = "SendManyFailed"

    def __init__(self, sent: list[object], cause: CmqError) -> None:
        super().__init__(f"{len(sent)} messages confirmed, then: {cause}")
        self.sent = sent
        self.cause = cause


UNKNOWN_OUTCOME: tuple[type[CmqError], ...] = (OutcomeUnknown, ResponseLost)
"""The errors after which a change may or may not have been stored (``except UNKNOWN_OUTCOME``)."""

_BY_CODE: dict[str, type[CmqError]] = {
    **BY_CODE,
    # Codes of the HTTP layer, raised as the queue error they refine.
    "InvalidJson": InvalidParameter,
    "EmptyBatch": InvalidParameter,
}


_REFINED: dict[type[CmqError], type[ServerError]] = {CmqError: ServerError}


def _with_status(base: type[CmqError]) -> type[ServerError]:
    """``base`` refined by `ServerError` (one class per base, made once)."""
    cls = _REFINED.get(base)
    if cls is None:
        namespace = {"__module__": __name__, "__qualname__": base.__qualname__}
        cls = cast(type[ServerError], type(base.__name__, (base, ServerError), namespace))
        cls.__doc__ = base.__doc__
        _REFINED[base] = cls
    return cls


def server_error(
    status: int, code: str, message: str, retry_after: float | None = None
) -> ServerError:
    """The error to raise for an error answer: an instance of the `cmq.errors` class of
    ``code`` (`CmqError` for codes this client does not know) and of `ServerError`."""
    cls = _with_status(_BY_CODE.get(code, CmqError))
    return cls(message or code, status=status, code=code, retry_after=retry_after)
