"""What `QueueMachine.apply` returns for each command of `cmq.fsm.commands` (which re-exports
these): plain frozen values handed back to the proposer, together the `Result` union. A user
error is a `CommandFailed` result, never an exception (apply is total); otherwise a command is
answered with its own result type (`Returns`: e.g. a `Produce` with `Produced`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from cmq import errors
from cmq.model import QueueAttributes

__all__ = [
    "CommandFailed",
    "Created",
    "Done",
    "EntryOutcomes",
    "Expired",
    "Leased",
    "LeasedMessage",
    "Produced",
    "Purged",
    "Result",
    "Retimed",
    "Returns",
    "Rewound",
    "SegmentsArchived",
    "SegmentsClaimed",
    "Tidied",
    "queue_not_found",
]

R_co = TypeVar("R_co", covariant=True)


class Returns(Protocol[R_co]):
    """A command whose successful apply returns an ``R_co``: every command declares it as its
    ``result_type`` (``Produce.result_type`` is `Produced`), so a proposer that awaits the
    result of a ``Returns[R]`` knows it gets an ``R`` (or a `CommandFailed`)."""

    @property
    def result_type(self) -> type[R_co]: ...


@dataclass(frozen=True, slots=True)
class CommandFailed:
    """A user error (``code`` from `cmq.errors`), e.g. ``QueueNotFound``; nothing changed."""

    code: str
    message: str


def queue_not_found(name: str) -> CommandFailed:
    """The answer to a command for a queue that does not exist."""
    return CommandFailed(errors.QueueNotFound.code, f"queue {name!r} does not exist")


@dataclass(frozen=True, slots=True)
class Done:
    """The command took effect."""


@dataclass(frozen=True, slots=True)
class Created:
    """``created`` False: the queue already existed with these attributes."""

    created: bool
    attributes: QueueAttributes


@dataclass(frozen=True, slots=True)
class Purged:
    count: int


@dataclass(frozen=True, slots=True)
class Produced:
    """``(id, seq)`` per produced message, in order (a deduplicated one: the original's)."""

    messages: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class LeasedMessage:
    """One message leased by a `Lease` command. Its id, send time and body are read with
    `QueueMachine.read` by whoever renders it: apply never reads the segment store for a
    lease, so a follower (whose results nobody reads) does no segment I/O to lease."""

    seq: int
    lease_id: int
    receive_count: int


@dataclass(frozen=True, slots=True)
class Leased:
    """``messages`` in seq order; ``dead_letter``: seqs now pending a move to the DLQ."""

    messages: tuple[LeasedMessage, ...]
    dead_letter: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EntryOutcomes:
    """Per entry: None = done, else an entry code from `cmq.errors`."""

    outcomes: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class Expired:
    count: int


@dataclass(frozen=True, slots=True)
class SegmentsClaimed:
    """``refused``: ``(first_seq, reason, holding batch id or "")`` per refused segment."""

    claimed: tuple[int, ...]
    refused: tuple[tuple[int, str, str], ...]


@dataclass(frozen=True, slots=True)
class SegmentsArchived:
    archived: tuple[int, ...]
    already: tuple[int, ...]
    refused: tuple[tuple[int, str, str], ...]


@dataclass(frozen=True, slots=True)
class Tidied:
    """Segments sealed and messages copied forward."""

    sealed: int
    copied: int


@dataclass(frozen=True, slots=True)
class Retimed:
    """How far the queue's time was ahead of the leader's clock (ms; 0: it was not) and the
    lead it now slews off (`cmq.fsm.commands.Retime`)."""

    ahead_ms: int


@dataclass(frozen=True, slots=True)
class Rewound:
    """Messages made deliverable again by a `cmq.fsm.commands.Rewind`, and the seq the next
    part of the rewind starts at (0: the rewind is complete)."""

    count: int
    next_seq: int


Result = (
    CommandFailed
    | Done
    | Created
    | Purged
    | Produced
    | Leased
    | EntryOutcomes
    | Expired
    | SegmentsClaimed
    | SegmentsArchived
    | Tidied
    | Retimed
    | Rewound
)
