"""Majority arithmetic, kept apart so the rule is stated (and tested) once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import IntEnum


class VoteResult(IntEnum):
    PENDING = 0
    WON = 1
    LOST = 2


def quorum_size(n_voters: int) -> int:
    """Smallest majority of ``n_voters``."""
    return n_voters // 2 + 1


def committed_index(matches: Iterable[int], n_voters: int, *, minority: bool = False) -> int:
    """Largest index that a majority of voters durably hold.

    ``matches`` has one durable match index per voter. ``minority`` is a test-only switch that
    commits on fewer than a majority; it exists so the simulator can prove it catches the bug.
    """
    ordered = sorted(matches, reverse=True)
    if not ordered:
        return 0
    need = quorum_size(n_voters)
    if minority:
        need = max(1, need - 1)
    if len(ordered) < need:
        return 0
    return ordered[need - 1]


def vote_result(voters: Iterable[int], votes: Mapping[int, bool]) -> VoteResult:
    """Whether a campaign has won, lost, or must keep waiting for answers."""
    voter_list = list(voters)
    need = quorum_size(len(voter_list))
    granted = sum(1 for v in voter_list if votes.get(v) is True)
    rejected = sum(1 for v in voter_list if votes.get(v) is False)
    if granted >= need:
        return VoteResult.WON
    if rejected > len(voter_list) - need:
        return VoteResult.LOST
    return VoteResult.PENDING
