"""How a `CmqError` crosses between cmq's own processes: one `Failure` value, the same on the
front-end socket (`cmq.frontend.wire`) and in the answer to a forwarded call
(`cmq.routing.rpc.encode_failure`). Pure: no I/O.

A failure carries the error's machine-readable code and message, its ``retry_after`` (seconds a
client should wait before trying again, None: no advice) and, for a forwarded call the peer no
longer leads, ``leader``: the group's leader as the peer knows it (0: none), a hint for the
caller's next try. The receiving side rebuilds the error from its code (`cmq.errors.error_for`),
so a class this release does not know arrives as a `CmqError` with that code, never as
something else.

What clients see is written elsewhere, in their protocols' own forms: the HTTP surfaces'
``{"error": {"code", "message"}}`` with ``Retry-After`` (`api.errors`) and the stream
protocol's ``Failed`` frame (`cmq.stream`), both carrying the same code and ``retry_after``.
"""

from __future__ import annotations

import msgspec

from cmq.errors import CmqError, error_for


class Failure(msgspec.Struct, frozen=True, array_like=True):
    """A `CmqError` as it crosses: MessagePack ``[code, message, retry_after, leader]``."""

    code: str
    message: str
    retry_after: float | None = None
    leader: int = 0
    """The group's leader as the answering node knows it (0: none): set on a forwarded call's
    "route it again" answer, 0 everywhere else."""

    @staticmethod
    def of(error: CmqError, leader: int = 0) -> Failure:
        return Failure(error.code, error.message, error.retry_after, leader)

    def error(self) -> CmqError:
        """The error this failure carries (the class its code names), with its
        ``retry_after`` (None: the class's own, as when the error was raised here)."""
        err = error_for(self.code, self.message)
        if self.retry_after is not None:
            err.retry_after = self.retry_after
        return err
