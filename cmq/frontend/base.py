"""The base of what crosses the front-end socket (`cmq.frontend.calls` lists the calls): the
wire version, a `Call` (a service method's parameters, its result type, the code that runs it)
and a `Failure` (a `CmqError` that crossed, `cmq.failure`). Pure: no I/O."""

from __future__ import annotations

import re
import typing
from typing import Any, ClassVar, Final, Generic, TypeVar, cast

import msgspec

from cmq.errors import UnreadableFrame
from cmq.service import QueueService

R = TypeVar("R")

WIRE_VERSION: Final = 7
"""The version of what crosses the socket (`cmq.frontend.wire` writes it in every frame). 7: a
`Failure` carries ``leader`` after ``retry_after`` (`cmq.failure`: the one form of an error
between cmq's processes, also a forwarded call's), and a per-entry send is its own call
(`SendEach`, tag 41; `Send` lost its ``per_entry`` field); 6: the
access key calls (tags 36-40, `cmq.frontend.key_calls`: a front end's copy of the key ring, and
the key administration), an exported and an imported message carry ``priority``, queue
statistics ``tenants``; 5: messages to send, received, exported and imported carry their
time-to-live deadline (``ttl_deadline_ms``), an imported one its ``deliver_at_ms``; queue
attributes carry ``priorities`` and ``retain_acked_seconds``, a message to send and a received
message ``priority``, queue statistics ``visible_by_priority``; the ``rewind`` call (tag 34) and
`ReadSegmentData` (tag 35, the binary segment read); 4: queue attributes carry
``max_delay_seconds``, a message to send ``deliver_at_ms`` and ``ttl_seconds``; 3: queue
attributes carry ``retry`` (release 0.3.0); 2: msgspec frames (0.2.0)."""

encoder: Final = msgspec.msgpack.Encoder()
"""The encoder of calls and results."""


class Call(msgspec.Struct, Generic[R], frozen=True, array_like=True):
    """One `QueueService` call, run in the node process by `run`; its result crosses the
    socket as ``result_type`` (`encode_result`, `decode_result`): the ``R`` of the class's
    ``Call[R]`` unless it sets another. Each subclass has its own tag (the first item of its
    encoded form) and ``METHOD``, the service method it calls (its name in snake case)."""

    METHOD: ClassVar[str]
    """The service method (the class name in snake case)."""
    result_type: ClassVar[Any]
    _results: ClassVar[msgspec.msgpack.Decoder[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.METHOD = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        if "result_type" not in cls.__dict__:
            # ``class Purge(Call[int])``: the result crosses as the ``R`` the class names,
            # unless it says otherwise (a shape that encodes more compactly).
            named = [
                typing.get_args(base)
                for base in getattr(cls, "__orig_bases__", ())
                if typing.get_origin(base) is Call
            ]
            if not named:
                return  # a subclass of a subclass: its parent's results
            cls.result_type = named[0][0]
        cls._results = msgspec.msgpack.Decoder(cls.result_type)

    async def run(self, service: QueueService) -> R:
        """Call ``METHOD`` on ``service`` with this call's fields as its keyword arguments (a
        call's fields are its method's parameters, by name and in order: a test checks them).
        A call whose result needs shaping to cross (a stream read whole) defines its own; the
        server answers the calls that are not the service's itself (`Metrics`, the key calls),
        so running one of those here is a bug."""
        method = getattr(service, self.METHOD, None)
        if method is None:
            raise NotImplementedError(f"{type(self).__name__} is not a QueueService call")
        result: R = await method(**{f: getattr(self, f) for f in self.__struct_fields__})
        return result

    def encode_result(self, result: R) -> bytes:
        return encoder.encode(result)

    def decode_result(self, payload: bytes) -> R:
        """The result in an answer; `UnreadableFrame` when it is not a ``result_type``."""
        try:
            return cast(R, self._results.decode(payload))
        except (msgspec.DecodeError, UnicodeDecodeError) as e:
            raise UnreadableFrame(
                f"front-end socket answer to {self.METHOD} does not decode (wire version "
                f"{WIRE_VERSION}): {e}"
            ) from None
