"""The front-end socket's frames (`cmq.frontend.proxy`), carrying the calls of
`cmq.frontend.calls`. Pure: no I/O.

A frame is ``[u32 length][u8 version][body]`` (big-endian; the length counts the version byte
and the body). The body is MessagePack:

* a request, front end to node: ``[id, call]`` (a `base.Call`, tagged), or ``[id, nil]``:
  cancel request ``id``;
* an answer, node to front end: ``[id, true, result]`` (the call's `Call.result_type`), or
  ``[id, false, failure]`` (`cmq.failure.Failure`: the `CmqError` the call raised).

Versions: the wire is version `WIRE_VERSION` (7: a failure carries ``leader``, the form a
forwarded call's failure has too; 6: the access key calls, tags 36-40,
`cmq.frontend.key_calls`, exported and imported messages gained ``priority``, statistics
``tenants``; 5: a message to send, a received message and an exported one gained
``ttl_deadline_ms``, an imported one ``deliver_at_ms`` and ``ttl_deadline_ms``, queue
attributes ``priorities`` and ``retain_acked_seconds``, messages ``priority``, statistics
``visible_by_priority``, and the rewind call came; 4: queue attributes gained
``max_delay_seconds`` and a message to send ``deliver_at_ms``; 3: queue attributes gained
``retry``; version 2 lacked it; version 1 was pickled tuples, release 0.1.0, and is not read:
nothing is unpickled).
A front end and its node process are always the same release, yet every frame says its
version: a frame of another version, a call tag this release does not know
(`calls.CALL_TAGS`), or a body that does not decode is `UnreadableFrame` naming what was found
and what this release reads; the connection is then dropped.
"""

from __future__ import annotations

import struct
from typing import Any, Final, TypeVar

import msgspec

from cmq.errors import CmqError, UnreadableFrame
from cmq.failure import Failure
from cmq.frontend.base import WIRE_VERSION, Call
from cmq.frontend.calls import CALL_TAGS, AnyCall

R = TypeVar("R")

HEAD: Final = struct.Struct(">I")
"""A frame's length (version byte and body)."""
MAX_FRAME: Final = 256 << 20
"""A frame above this is a broken peer: the connection is closed."""
_PICKLE: Final = 0x80
"""The first byte of a version 1 frame's body (a pickle's protocol opcode)."""

_encoder = msgspec.msgpack.Encoder()
_requests = msgspec.msgpack.Decoder(tuple[int, AnyCall | None])
_answers = msgspec.msgpack.Decoder(tuple[int, bool, msgspec.Raw])
_failures = msgspec.msgpack.Decoder(Failure)


# -- frames ----------------------------------------------------------------------------------------
def frame(body: bytes) -> bytes:
    """``body`` as a frame of this wire version."""
    return HEAD.pack(len(body) + 1) + bytes((WIRE_VERSION,)) + body


def encode_request(rid: int, call: Call[Any] | None) -> bytes:
    """The frame asking for ``call`` as request ``rid`` (None: cancel request ``rid``)."""
    return frame(_encoder.encode((rid, call)))


def encode_answer(rid: int, call: Call[R], result: R) -> bytes:
    """The frame answering request ``rid`` with ``call``'s ``result``."""
    return frame(_encoder.encode((rid, True, msgspec.Raw(call.encode_result(result)))))


def encode_failure(rid: int, error: CmqError) -> bytes:
    """The frame answering request ``rid`` with ``error``."""
    return frame(_encoder.encode((rid, False, Failure.of(error))))


def _body(data: bytes) -> bytes:
    """A frame's body (what follows its length); `UnreadableFrame` unless it is of this
    wire version."""
    if not data:
        raise UnreadableFrame("an empty front-end socket frame")
    version = data[0]
    if version == _PICKLE:
        raise UnreadableFrame(
            f"front-end socket frame of {len(data)} bytes is a pickle (wire version 1, release "
            f"0.1.0); this release reads version {WIRE_VERSION} and unpickles nothing"
        )
    if version != WIRE_VERSION:
        newer = " (a newer release's)" if version > WIRE_VERSION else ""
        raise UnreadableFrame(
            f"front-end socket frame of {len(data)} bytes is of wire version {version}{newer}; "
            f"this release reads version {WIRE_VERSION}"
        )
    return data[1:]


def decode_request(data: bytes) -> tuple[int, AnyCall | None]:
    """``(request id, call)`` of a request frame (what follows its length); call None: a
    cancel. `UnreadableFrame` naming what is wrong when it is not one."""
    body = _body(data)
    try:
        return _requests.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        tag = _call_tag(body)
        if tag is not None and tag not in CALL_TAGS:
            raise UnreadableFrame(
                f"front-end socket call tag {tag} is unknown: a call of a newer release than "
                f"this one, which reads tags {min(CALL_TAGS)}-{max(CALL_TAGS)} (wire version "
                f"{WIRE_VERSION})"
            ) from None
        raise UnreadableFrame(
            f"front-end socket frame of {len(data)} bytes does not decode (wire version "
            f"{WIRE_VERSION}): {e}"
        ) from None


def decode_answer(data: bytes) -> tuple[int, bool, bytes]:
    """``(request id, ok, payload)`` of an answer frame: ``payload`` is the call's result
    (`Call.decode_result`) when ``ok``, else a failure (`decode_failure`)."""
    body = _body(data)
    try:
        rid, ok, raw = _answers.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise UnreadableFrame(
            f"front-end socket answer of {len(data)} bytes does not decode (wire version "
            f"{WIRE_VERSION}): {e}"
        ) from None
    return rid, ok, bytes(raw)


def decode_failure(payload: bytes) -> CmqError:
    """The error a failure answer carries."""
    try:
        return _failures.decode(payload).error()
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise UnreadableFrame(
            f"front-end socket failure answer does not decode (wire version {WIRE_VERSION}): {e}"
        ) from None


def _call_tag(body: bytes) -> int | None:
    """The tag of a request's call (the first item of its second item), if an integer."""
    try:
        items = msgspec.msgpack.decode(body)
    except msgspec.DecodeError:
        return None
    if isinstance(items, list) and len(items) == 2 and isinstance(items[1], list) and items[1]:
        tag = items[1][0]
        if isinstance(tag, int) and not isinstance(tag, bool):
            return tag
    return None
