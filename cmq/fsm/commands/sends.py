"""Operations on encoded sends that never decode a message: the group leader restamps each send
with its own clock (`restamp_produce`) and merges plain sends to one queue into one proposal
(`produce_parts`, `merge_produce`; `cmq.routing.coalesce`). They walk the `PRODUCE_RECORDS`
framing (`cmq.fsm.commands.produce`) and give the bytes `encode_command` would.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cmq.errors import InvalidParameter, NewerLayout
from cmq.fsm.commands.codec import CommandType
from cmq.fsm.commands.produce import message_frames

__all__ = ["SendParts", "merge_produce", "produce_parts", "restamp_produce"]

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


def restamp_produce(command: bytes, now_ms: int) -> bytes:
    """The encoded `Produce` ``command`` carrying ``now_ms`` instead of the time it was built
    with (the group leader stamps every send with its own clock). A copy with 8 bytes replaced;
    anything that is not an encoded `Produce` raises `InvalidParameter`."""
    if command[:1] not in (bytes((CommandType.PRODUCE_RECORDS,)), bytes((CommandType.PRODUCE,))):
        raise InvalidParameter(f"not an encoded send: command type {command[:1]!r}")
    if len(command) < 5:
        raise InvalidParameter("truncated send")
    at = 5 + _U32.unpack_from(command, 1)[0]
    if at + 8 > len(command):
        raise InvalidParameter("truncated send")
    return b"".join((command[:at], _I64.pack(now_ms), command[at + 8 :]))


@dataclass(frozen=True, slots=True)
class SendParts:
    """An encoded plain send taken apart for merging (`produce_parts`): its queue, how many
    messages it carries and their bytes exactly as encoded."""

    queue: str
    count: int
    messages: bytes


def produce_parts(command: bytes) -> SendParts | None:
    """``command`` (an encoded `Produce`) as `SendParts`, or None when it is not to be merged:
    not a `PRODUCE_RECORDS`, an import (its trailing expected count), or message options this
    release does not know (a newer release's: apply decides, `NewerLayout`). Walks the
    message framing only (lengths and option fields), never decoding a message."""
    if command[:1] != bytes((CommandType.PRODUCE_RECORDS,)) or len(command) < 5:
        return None
    size = len(command)
    at = 5 + _U32.unpack_from(command, 1)[0]
    if at + 12 > size:
        return None
    count = _U32.unpack_from(command, at + 8)[0]
    start = at + 12
    try:
        _, end = message_frames(command, start, count)
    except (InvalidParameter, NewerLayout):
        return None
    if end != size:  # an import's expected count trails the messages
        return None
    try:
        queue = command[5:at].decode()
    except UnicodeDecodeError:
        return None
    return SendParts(queue, count, command[start:])


def merge_produce(queue: str, now_ms: int, parts: list[SendParts]) -> bytes:
    """One encoded `Produce` of ``parts``' messages in order, stamped ``now_ms``: the bytes
    `encode_command` gives for a `Produce` of them all (the layout is unchanged: a merged send
    is an ordinary `PRODUCE_RECORDS`)."""
    name = queue.encode()
    head = b"".join(
        (
            bytes((CommandType.PRODUCE_RECORDS,)),
            _U32.pack(len(name)),
            name,
            _I64.pack(now_ms),
            _U32.pack(sum(p.count for p in parts)),
        )
    )
    return b"".join([head, *(p.messages for p in parts)])
