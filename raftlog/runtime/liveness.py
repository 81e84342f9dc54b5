"""Node liveness and the choice of groups to quiesce, for `MultiRaft`.

Idle groups quiesce (as in CockroachDB): at a tick where a leader finds nothing in flight
(`GroupDriver.can_quiesce`) and every other replica's node is live, it sends each follower one
``QUIESCE`` heartbeat and is no longer ticked; a follower that gets one from its leader stops
ticking too (`GroupDriver.quiesce_follower`). So an idle group costs nothing per tick.

Node liveness replaces the per-group heartbeats of quiesced groups: every tick each node sends
every peer one empty ``BEATS`` frame, and a peer from which nothing arrived for
``limit`` ticks, or whose connection dropped, is suspect (`PeerLiveness`). A peer turning
suspect wakes every quiesced group of the node (`GroupDriver.wake`: followers first catch up the
ticks they missed, so an election starts one election timeout after the leader was last heard,
as without quiescence), and no group with a replica there quiesces until it is heard from again.
A follower led by a peer that turned suspect campaigns within a few ticks, as when the
connection drops (`raftlog.core.election.Elections.report_peer_down`): a paused or cut-off
leader costs ``limit`` ticks of silence, not a randomized election timeout of up to twice
that, and the followers campaign in rank order instead of splitting the vote.
Any input to a quiesced group but a heartbeat answer (a proposal, an append, a vote request, a
transfer) wakes it as well. Quiescence never changes what the Raft core decides, only when it is
ticked: the core's safety does not depend on timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from raftlog.runtime.group import GroupDriver


class PeerLiveness:
    """Which peers were heard from lately, in ticks (pure: the host feeds ticks and frames)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the liveness limit must be at least one tick")
        self.limit = limit
        self.ticks = 0
        self._heard: dict[int, int] = {}
        self._suspect: set[int] = set()

    def heard(self, peer: int) -> None:
        """A frame from ``peer`` arrived: it is live."""
        self._heard[peer] = self.ticks
        self._suspect.discard(peer)

    def tick(self, peers: Iterable[int]) -> dict[int, int]:
        """Advance one tick. Returns the peers that just turned suspect, each with the ticks it
        has been silent (empty: none did), for the woken followers to catch up."""
        self.ticks += 1
        newly: dict[int, int] = {}
        for peer in peers:
            silent = self.ticks - self._heard.setdefault(peer, self.ticks)
            if silent >= self.limit and peer not in self._suspect:
                self._suspect.add(peer)
                newly[peer] = silent
        return newly

    def down(self, peer: int) -> int:
        """``peer``'s connection dropped: suspect at once. Returns the ticks since it was last
        heard from."""
        self._suspect.add(peer)
        return self.ticks - self._heard.get(peer, self.ticks)

    def is_live(self, peer: int) -> bool:
        return peer not in self._suspect

    def suspects(self) -> tuple[int, ...]:
        return tuple(sorted(self._suspect))


@dataclass(frozen=True, slots=True)
class Quiescing:
    """A group led here that quiesces now: its last heartbeat goes to ``followers``."""

    group: int
    term: int
    commit: int
    followers: tuple[int, ...]


def quiesce_idle(
    groups: Mapping[int, GroupDriver], me: int, live: Callable[[int], bool]
) -> list[Quiescing]:
    """Mark quiesced every group led here with nothing in flight whose other replicas are all
    on ``live`` nodes; returns them, for the host to send their last heartbeats."""
    out = []
    for gid, g in groups.items():
        if g.quiesced or not g.can_quiesce():
            continue
        r = g.raw.raft
        others = tuple(p for p in r.progress if p != me)
        if not all(live(p) for p in others):
            continue
        g.quiesced = True
        out.append(Quiescing(gid, r.term, r.log.committed, others))
    return out
