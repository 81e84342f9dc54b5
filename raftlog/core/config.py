"""Tuning of one Raft node (`Config`) and the deliberate bugs tests plant (`UnsafeHooks`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class UnsafeHooks:
    """Deliberate protocol bugs, for proving that the simulator's checkers have teeth.

    Never enable outside tests: each one breaks a Raft safety or liveness property.
    """

    commit_on_minority: bool = False
    """Count an entry committed when one node fewer than a majority holds it."""
    vote_twice: bool = False
    """Grant every vote request, even after voting for someone else in the same term."""
    slow_elections: bool = False
    """Draw the randomized election timeout from ``[8, 16)`` election timeouts instead of
    ``[1, 2)``: still correct, but a group takes several timeouts to recover from a fault."""
    lazy_pipeline: bool = False
    """Send nothing on an append's acknowledgement: replication moves one message per
    heartbeat answer instead of a full window per round trip (a follower catches up slowly)."""
    skip_recovery: bool = False
    """Vote and campaign at once after a restart, trusting the disk (`raftlog.core.recovery`):
    a node restored from an older copy of its data can then elect a leader lacking entries it
    acknowledged, or vote twice in one term."""


@dataclass(frozen=True, slots=True)
class Config:
    """Tuning of one RawNode. Times are in ticks; sizes in bytes.

    Invariant: ``heartbeat_tick < election_tick``. The randomized election timeout is drawn
    from ``[election_tick, 2 * election_tick)``.
    """

    id: int
    election_tick: int = 10
    heartbeat_tick: int = 1
    max_msg_bytes: int = 1 << 20
    max_inflight_msgs: int = 256
    max_inflight_bytes: int = 16 << 20
    max_uncommitted_bytes: int = 64 << 20
    max_apply_bytes: int = 16 << 20
    pre_vote: bool = True
    check_quorum: bool = True
    rejoin: bool = False
    """This node lost its disk and restarts under its old id: it neither votes nor campaigns
    until it has caught up to a commit index learned from a leader (a voter that forgot
    entries it acknowledged could otherwise help elect a leader lacking them), and it asks the
    leader to re-probe it (`MsgType.LOG_LOST`) instead of failing on a commit index beyond its
    log."""
    unsafe: UnsafeHooks = field(default_factory=UnsafeHooks)

    def validate(self) -> None:
        """Raise ``ValueError`` on a configuration that cannot work."""
        if self.id <= 0:
            raise ValueError("node id must be positive")
        if not 0 < self.heartbeat_tick < self.election_tick:
            raise ValueError("need 0 < heartbeat_tick < election_tick")
        if self.max_inflight_msgs <= 0 or self.max_msg_bytes <= 0:
            raise ValueError("inflight and message limits must be positive")
