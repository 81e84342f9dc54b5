"""What a replicated state machine implements, and the batch format of proposal entries (pure).

Proposals that arrive while a group is busy are packed into one Raft entry; the runtime unpacks
them on apply and calls `StateMachine.apply` once per proposal, in order.

Batch layout (version `BATCH_VERSION` = 1, written unchanged since release 0.1.0): ``[u8
version][u32 count]`` then ``count`` times ``[u32 length][command]``. A later version is
refused with `NewerFormat` naming the group and entry and both versions; version 0 or a
malformed batch is a broken invariant (it was committed, so it is damage or a bug).
"""

from __future__ import annotations

import struct
from typing import Protocol, runtime_checkable

from raftlog.errors import InvariantViolation, NewerFormat

_HEAD = struct.Struct(">BI")
_LEN = struct.Struct(">I")
BATCH_VERSION = 1


class StateMachine(Protocol):
    """A deterministic state machine replicated by one group.

    Contract: ``apply`` is called with every committed proposal exactly once per state (and again
    after a restart for entries beyond the latest snapshot), in log order, on the event loop; it
    must be deterministic (no clocks, no randomness) and must not block. Its return value is
    handed to the proposer. Raising means a broken invariant: the group stops.
    """

    def apply(self, index: int, command: bytes) -> object:
        """Apply one committed proposal (entry ``index``); return the proposer's result."""
        ...

    def snapshot(self) -> bytes:
        """An image of the state after the last applied proposal.

        Runs on a worker thread (it may fsync files) while the event loop goes on; `apply` and
        `restore` are never called until it returns, but read-only methods may be.
        """
        ...

    def restore(self, index: int, data: bytes) -> None:
        """Replace the state with the image ``data`` taken at ``index`` (``b""``: empty state)."""
        ...


@runtime_checkable
class AfterApply(Protocol):
    """Optional hook of a `StateMachine`: the runtime calls ``after_apply()`` on the event loop
    after each batch of `StateMachine.apply` calls (the committed entries of one Ready) and
    after each `StateMachine.restore`, before it handles anything else of the group.

    It lets a pure state machine record effects during ``apply`` (e.g. "these keys changed")
    and a host consume them afterwards, so that ``apply`` itself makes no outward call. Like
    ``apply`` it must not block; raising stops the group.
    """

    def after_apply(self) -> None: ...


@runtime_checkable
class ExportSnapshot(Protocol):
    """Optional hook of a `StateMachine` whose snapshot images are not self-contained (a light
    image that names files kept beside it): before an image taken here is shipped to a follower
    that fell behind the compacted log, the runtime calls ``export_snapshot(data)`` and ships
    what it returns instead, which `StateMachine.restore` on the follower must accept.

    Runs on a worker thread (it may read files) while the event loop goes on, like
    `StateMachine.snapshot`; raising `RaftError`, ``OSError`` or ``ValueError`` fails this
    transfer (the leader tries again later)."""

    def export_snapshot(self, data: bytes) -> bytes: ...


def encode_batch(commands: list[bytes]) -> bytes:
    """Pack ``commands`` (each non-empty) into one entry payload."""
    parts = [_HEAD.pack(BATCH_VERSION, len(commands))]
    for c in commands:
        parts.append(_LEN.pack(len(c)))
        parts.append(c)
    return b"".join(parts)


def decode_batch(data: bytes, where: str = "a committed entry") -> list[bytes]:
    """Inverse of `encode_batch`. A malformed payload is a broken invariant (it was committed);
    a newer batch version is `NewerFormat`. ``where`` (e.g. "group 3 entry 17") names the
    entry in either error."""
    view = memoryview(data)
    if len(view) < _HEAD.size:
        raise InvariantViolation(f"{where}: too short for a batch header")
    version, count = _HEAD.unpack_from(view, 0)
    if version > BATCH_VERSION:
        raise NewerFormat(where, f"batch version {version}", f"batch version {BATCH_VERSION}")
    if version != BATCH_VERSION:
        raise InvariantViolation(f"{where}: unknown batch version {version}")
    pos = _HEAD.size
    out: list[bytes] = []
    for _ in range(count):
        if pos + _LEN.size > len(view):
            raise InvariantViolation(f"{where}: truncated batch")
        (n,) = _LEN.unpack_from(view, pos)
        pos += _LEN.size
        if pos + n > len(view):
            raise InvariantViolation(f"{where}: truncated batch")
        out.append(bytes(view[pos : pos + n]))
        pos += n
    if pos != len(view):
        raise InvariantViolation(f"{where}: trailing bytes after batch")
    return out
