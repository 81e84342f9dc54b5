"""`Proposer`: how a group's leader proposes a command and reads its applied result.

A data-group command declares the result it is answered with (`cmq.fsm.commands.Returns`);
`Proposer.command` proposes it and narrows what the runtime hands back (`MultiRaft.propose`
returns ``object``: it hosts the catalog and the queue machines side by side) in one place,
`Proposer.propose_as`. A failed command becomes the `CmqError` of its code
(`cmq.errors.error_for`); any other result is a broken invariant. Every command proposed here
is stamped with this node's clock (`Proposer.stamp`), refused while that clock is not trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from cmq.errors import InvariantBroken, OutcomeUnknown, Overloaded, error_for
from cmq.fsm.commands import Command, CommandFailed, Returns, encode_command
from raftlog.errors import NotLeader
from raftlog.errors import Overloaded as RaftOverloaded
from raftlog.runtime import MultiRaft

R = TypeVar("R")


def encoded(cmd: Returns[object]) -> bytes:
    """The proposal bytes of a data-group command (every `Returns` is one of `Command`)."""
    if not isinstance(cmd, Command):
        raise InvariantBroken(f"not a queue command: {cmd!r}")
    return encode_command(cmd)


class Proposer:
    """Proposes to the groups this node leads, with ``request_timeout`` per proposal."""

    def __init__(
        self, raft: MultiRaft, request_timeout: float, clock_stamp: Callable[[], int | None]
    ) -> None:
        self._raft = raft
        self._timeout = request_timeout
        self.clock_stamp = clock_stamp
        """This node's clock for a command, or None while it is not trusted
        (`cmq.node.clockguard.ClockGuard.stamp`)."""

    def stamp(self) -> int:
        """This node's clock for a command proposed here; `NotLeader` (route it again) while
        the clock is not trusted, checked on the very reading that stamps (a long poll may
        have begun before a step)."""
        ms = self.clock_stamp()
        if ms is None:
            raise NotLeader(0, "this node's clock is off; it does not lead")
        return ms

    async def propose(self, group: int, data: bytes) -> object:
        """Propose ``data`` to ``group`` and await its applied result, whatever its machine
        returned; `OutcomeUnknown` when it is not applied within the request deadline,
        `Overloaded` when the group is full."""
        try:
            return await self._raft.propose(group, data, timeout=self._timeout)
        except TimeoutError:
            raise OutcomeUnknown("the change was not applied in time; outcome unknown") from None
        except RaftOverloaded as e:
            raise Overloaded(str(e)) from None

    async def command(self, group: int, cmd: Returns[R]) -> R:
        """Propose the data-group command ``cmd`` to ``group`` and return its result (an
        ``R``: its ``result_type``); a failed command raises its `CmqError`."""
        return await self.propose_as(group, encoded(cmd), cmd.result_type, type(cmd).__name__)

    async def propose_as(self, group: int, data: bytes, result_type: type[R], what: str) -> R:
        """`propose` ``data`` (a command named ``what``) whose machine answers it with a
        ``result_type``: the one place a result is narrowed. A `CommandFailed` raises the
        `CmqError` of its code; any other result is a broken invariant."""
        res = await self.propose(group, data)
        if isinstance(res, result_type):
            return res
        if isinstance(res, CommandFailed):
            raise error_for(res.code, res.message)
        raise InvariantBroken(f"{what} returned {res!r}, not a {result_type.__name__}")
