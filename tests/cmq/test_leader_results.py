"""`LeaderOps` narrows what a group answers a proposal with in one place (`propose_as`): a queue
command's declared result is returned typed, a `CommandFailed` raises its error, anything else
is a broken invariant naming the command."""

from __future__ import annotations

import pytest

from cmq.errors import InvariantBroken, QueueNotFound
from cmq.fsm.commands import CommandFailed, Done, Purge, Purged, encode_command
from cmq.routing.ops import LeaderOps
from tests.cmq.helpers import leader_ops


class AnsweringRaft:
    """The runtime's ``propose``, answered with ``result`` (what the group's machine returned)."""

    def __init__(self, result: object) -> None:
        self.result = result
        self.proposed: list[tuple[int, bytes]] = []

    async def propose(self, group: int, data: bytes, timeout: float) -> object:
        self.proposed.append((group, data))
        return self.result


def leader(raft: AnsweringRaft) -> LeaderOps:
    return leader_ops(raft, b"leader-results-test-secret-0123")


async def test_a_command_is_answered_with_its_declared_result() -> None:
    raft = AnsweringRaft(Purged(3))
    res = await leader(raft).command(2, Purge("q", 5))
    assert res == Purged(3) and res.count == 3
    assert raft.proposed == [(2, encode_command(Purge("q", 5)))]


async def test_a_failed_command_raises_its_error() -> None:
    failed = CommandFailed(QueueNotFound.code, "queue 'q' does not exist")
    with pytest.raises(QueueNotFound, match="does not exist"):
        await leader(AnsweringRaft(failed)).command(2, Purge("q", 5))


async def test_another_result_is_a_broken_invariant_naming_the_command() -> None:
    with pytest.raises(InvariantBroken, match=r"Purge returned Done\(\), not a Purged"):
        await leader(AnsweringRaft(Done())).command(2, Purge("q", 5))
