"""What the leader knows about each follower: match/next, flow-control state, inflight window.

Invariant: ``0 <= match < next``. States:
- PROBE: the follower's position is unknown; one append at a time, then wait for its answer (or
  a heartbeat response) before sending the next.
- REPLICATE: the follower is in sync; appends are pipelined optimistically (``next`` advances on
  send) up to the inflight window.
- SNAPSHOT: a snapshot is on its way; nothing else is sent until it is acknowledged or fails.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

from raftlog.errors import InvariantViolation


class ProgressState(IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class Inflights:
    """Appends sent but not yet acknowledged, bounded by message count *and* bytes.

    Each slot records the last index an append carried and its size; an acknowledgement of
    index *i* frees every slot with last index ``<= i``. Adding to a full window is a bug.
    """

    __slots__ = ("_bytes", "_slots", "max_bytes", "max_count")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._slots: deque[tuple[int, int]] = deque()
        self._bytes = 0

    def full(self) -> bool:
        """True when no further append may be sent."""
        return len(self._slots) >= self.max_count or (
            self.max_bytes > 0 and self._bytes >= self.max_bytes
        )

    def add(self, last_index: int, size: int) -> None:
        """Record an append ending at ``last_index`` carrying ``size`` bytes."""
        if self.full():
            raise InvariantViolation("cannot add into a full inflight window")
        if self._slots and last_index < self._slots[-1][0]:
            raise InvariantViolation("inflight indexes must not decrease")
        self._slots.append((last_index, size))
        self._bytes += size

    def free_le(self, index: int) -> None:
        """Forget every append whose last index is ``<= index``."""
        while self._slots and self._slots[0][0] <= index:
            _, size = self._slots.popleft()
            self._bytes -= size

    def free_first_one(self) -> None:
        """Forget the oldest append: used when a heartbeat answer shows the follower is alive
        but the window stayed full (an append or its answer was lost), so that the next append
        -- rejected if there is a gap -- gets the follower re-probed instead of stalling."""
        if self._slots:
            _, size = self._slots.popleft()
            self._bytes -= size

    def reset(self) -> None:
        """Forget everything (the follower's position is being re-probed)."""
        self._slots.clear()
        self._bytes = 0

    def count(self) -> int:
        return len(self._slots)

    def bytes(self) -> int:
        return self._bytes


class Progress:
    """The leader's view of one peer. Mutable; owned by the leader's tracker."""

    __slots__ = (
        "epoch",
        "inflights",
        "is_learner",
        "match",
        "msg_app_probe_paused",
        "next",
        "pending_snapshot",
        "recent_active",
        "state",
    )

    def __init__(self, next_index: int, max_count: int, max_bytes: int, is_learner: bool) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.pending_snapshot = 0
        self.recent_active = False
        self.msg_app_probe_paused = False
        self.inflights = Inflights(max_count, max_bytes)
        self.is_learner = is_learner
        self.epoch = 0
        """Set by the leader to a value no earlier record for this node had (`Message.epoch`)."""

    def _reset_state(self, state: ProgressState) -> None:
        self.msg_app_probe_paused = False
        self.pending_snapshot = 0
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        """Re-probe: after a rejection, a failed snapshot, or a lost connection."""
        if self.state is ProgressState.SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(ProgressState.PROBE)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset_state(ProgressState.PROBE)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        """The follower is known to match at ``match``: start pipelining."""
        self._reset_state(ProgressState.REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        """A snapshot at ``snapshot_index`` is being sent."""
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def maybe_update(self, index: int) -> bool:
        """The follower acknowledged up to ``index``. Returns whether ``match`` advanced.

        Stale or duplicated acknowledgements never move ``match`` or ``next`` backwards.
        """
        updated = False
        if self.match < index:
            self.match = index
            updated = True
            self.msg_app_probe_paused = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """The follower rejected an append at ``rejected``; ``match_hint`` is where the logs
        probably agree. Returns False when the rejection is stale (ignored)."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.msg_app_probe_paused = False
        return True

    def sent_entries(self, last_index: int, n_entries: int, size: int) -> None:
        """Book an append just sent carrying entries up to ``last_index``."""
        if self.state is ProgressState.REPLICATE:
            if n_entries > 0:
                self.next = last_index + 1
                self.inflights.add(last_index, size)
        elif self.state is ProgressState.PROBE:
            self.msg_app_probe_paused = True

    def is_paused(self) -> bool:
        """Whether the leader must not send further appends to this peer now."""
        if self.state is ProgressState.PROBE:
            return self.msg_app_probe_paused
        if self.state is ProgressState.REPLICATE:
            return self.inflights.full()
        return True

    def describe(self) -> str:
        """A one-line summary for traces and status output."""
        paused = " paused" if self.is_paused() else ""
        return (
            f"{self.state.name} match={self.match} next={self.next}{paused} "
            f"inflight={self.inflights.count()}"
        )
