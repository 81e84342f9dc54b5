"""The simulator's safety checker: Raft's invariants, checked incrementally as events happen.

Each check is fed by the simulation at the moment the relevant thing happens (a node observed
after an input, a Ready's entries, an apply, an acknowledgement, a disk sync), so checking "after
every step" costs O(what the step did), not O(cluster state). A broken invariant raises
`SafetyViolation` naming the check:

- ``election-safety``: at most one leader per (group, term).
- ``leader-append-only``: while a node leads a term its log only grows (the entry at its last
  index seen earlier is unchanged).
- ``log-matching``: (group, index, term) determines the entry and its predecessor's term -- the
  inductive form of "two logs agreeing at (index, term) agree on everything before".
- ``leader-completeness``: a leader of a term later than every term known when an entry was
  acknowledged to a client holds that entry (or has compacted past it).
- ``state-machine-safety``: every node applying index *i* of a group applies the same entry and
  reaches the same hash-chain digest (snapshot installs are checked against the digest too).
- ``durability``: every acknowledged entry is durable (on disk or under a durable snapshot) on
  enough voters of the group's current configuration that the voters lacking it are fewer than
  a quorum -- so it survives any crash that leaves a majority.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raftlog.core.quorum import quorum_size
from raftlog.core.raft import Raft
from raftlog.core.types import ConfChange, ConfState, Entry, EntryKind, Role


class SafetyViolation(Exception):
    """A checked invariant does not hold. ``check`` names it; ``detail`` says where and how."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(f"{check}: {detail}")
        self.check = check
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Ack:
    """An entry acknowledged to a client: its proposing leader applied it at (index, term).

    ``max_term`` is the highest term any node of the group had reached at that moment: the
    entry was committed in a term no later than that.
    """

    group: int
    index: int
    term: int
    data: bytes
    max_term: int


@dataclass(frozen=True, slots=True)
class AppliedRecord:
    """What the first node to reach an index applied there (``data`` None: known only from a
    snapshot's digest)."""

    term: int
    data: bytes | None
    digest: bytes


HoldsFn = Callable[[int, int, int, int], bool]
"""``holds(node, group, index, term)``: is that entry durable on that node's disk?"""

SnapIndexFn = Callable[[int, int], int]
"""``snap_index(node, group)``: the index of the snapshot durable on that node's disk."""


def _index_of(item: tuple[int, Ack]) -> int:
    return item[0]


class Checker:
    """Incremental safety checks over all groups of one simulation run. Mutable."""

    __slots__ = (
        "_acked",
        "_applied",
        "_conf",
        "_durable_floor",
        "_holds",
        "_leader_track",
        "_leaders",
        "_log",
        "_snap_index",
        "max_term",
    )

    def __init__(
        self, confs: dict[int, ConfState], holds: HoldsFn, snap_index: SnapIndexFn
    ) -> None:
        """``confs``: each group's founding configuration; ``holds``/``snap_index``: oracles
        answering from the nodes' durable disk images."""
        self._holds = holds
        self._snap_index = snap_index
        self._leaders: dict[tuple[int, int], int] = {}
        self._leader_track: dict[tuple[int, int], tuple[int, int, int]] = {}
        self._log: dict[tuple[int, int, int], tuple[int, bytes, int]] = {}
        self._applied: dict[tuple[int, int], AppliedRecord] = {}
        self._acked: dict[int, list[tuple[int, Ack]]] = {g: [] for g in sorted(confs)}
        self._durable_floor: dict[int, int] = dict.fromkeys(sorted(confs), 0)
        self._conf: dict[int, tuple[int, ConfState]] = {g: (0, c) for g, c in sorted(confs.items())}
        self.max_term: dict[int, int] = dict.fromkeys(sorted(confs), 0)

    # -- queries ----------------------------------------------------------------------------------
    def conf(self, group: int) -> ConfState:
        """The group's configuration at the highest conf-change index any node has applied."""
        return self._conf[group][1]

    def acked(self, group: int) -> list[Ack]:
        """Entries of ``group`` acknowledged to clients, in index order."""
        return [a for _, a in self._acked[group]]

    def leaders(self) -> dict[tuple[int, int], int]:
        """(group, term) -> the leader seen in that term."""
        return dict(self._leaders)

    # -- roles ------------------------------------------------------------------------------------
    def observe(self, group: int, node: int, r: Raft) -> None:
        """Called after every input to (node, group): election safety, append-only, and
        leader completeness for a leader seen for the first time."""
        self.max_term[group] = max(self.max_term[group], r.term)
        key = (group, node)
        if r.role is not Role.LEADER:
            if key in self._leader_track:
                del self._leader_track[key]
            return
        log = r.log
        last = log.last_index()
        track = self._leader_track.get(key)
        if track is not None and track[0] == r.term:
            _, t_last, t_term = track
            if last < t_last:
                raise SafetyViolation(
                    "leader-append-only",
                    f"g{group} leader {node} term {r.term}: last index fell {t_last} -> {last}",
                )
            now_term = log.term(t_last)
            if now_term not in (t_term, 0):
                raise SafetyViolation(
                    "leader-append-only",
                    f"g{group} leader {node} term {r.term}: entry {t_last} changed term "
                    f"{t_term} -> {now_term}",
                )
        else:
            lt = (group, r.term)
            other = self._leaders.setdefault(lt, node)
            if other != node:
                raise SafetyViolation(
                    "election-safety", f"g{group} term {r.term} has leaders {other} and {node}"
                )
            self._check_completeness(group, node, r)
        self._leader_track[key] = (r.term, last, log.term(last))

    def forget(self, group: int, node: int) -> None:
        """(node, group) lost its volatile state (crash or wipe)."""
        self._leader_track.pop((group, node), None)

    def _check_completeness(self, group: int, node: int, r: Raft) -> None:
        log = r.log
        acked = self._acked[group]
        start = bisect.bisect_left(acked, log.first_index(), key=_index_of)
        for index, ack in acked[start:]:
            if ack.max_term >= r.term:
                continue
            held = log.term(index)
            if held != ack.term:
                raise SafetyViolation(
                    "leader-completeness",
                    f"g{group} leader {node} of term {r.term} lacks acknowledged entry "
                    f"{index}/{ack.term} (holds term {held}, last {log.last_index()})",
                )

    # -- logs -------------------------------------------------------------------------------------
    def on_entries(self, group: int, node: int, entries: Sequence[Entry], prev_term: int) -> None:
        """Entries about to be persisted by (node, group); ``prev_term`` is the term of the
        entry before the first (0 when unknown, e.g. compacted)."""
        prev = prev_term
        log = self._log
        for e in entries:
            key = (group, e.index, e.term)
            val = (int(e.kind), e.data, prev)
            old = log.get(key)
            if old is None:
                log[key] = val
            elif old != val and (
                old[:2] != val[:2] or (old[2] != 0 and prev != 0 and old[2] != prev)
            ):
                raise SafetyViolation(
                    "log-matching",
                    f"g{group} node {node}: entry {e.index}/{e.term} is {val[1]!r} after term "
                    f"{prev}, elsewhere {old[1]!r} after term {old[2]}",
                )
            prev = e.term

    # -- state machines ---------------------------------------------------------------------------
    def on_apply(self, group: int, node: int, e: Entry, digest: bytes) -> None:
        """(node, group) applied ``e`` reaching ``digest``."""
        key = (group, e.index)
        old = self._applied.get(key)
        if old is None:
            self._applied[key] = AppliedRecord(e.term, e.data, digest)
            if e.kind is EntryKind.CONF:
                self._on_conf(group, e)
            return
        if old.digest != digest or (
            old.data is not None and (old.term, old.data) != (e.term, e.data)
        ):
            raise SafetyViolation(
                "state-machine-safety",
                f"g{group} node {node} applied {e.index}/{e.term} {e.data!r}, "
                f"another node applied term {old.term} {old.data!r} there",
            )

    def on_restore(self, group: int, node: int, index: int, term: int, digest: bytes) -> None:
        """(node, group) installed a snapshot at ``index`` with state machine ``digest``."""
        key = (group, index)
        old = self._applied.get(key)
        if old is None:
            self._applied[key] = AppliedRecord(term, None, digest)
        elif old.digest != digest or old.term != term:
            raise SafetyViolation(
                "state-machine-safety",
                f"g{group} node {node} installed a snapshot at {index}/{term} whose state "
                f"differs from what was applied there (term {old.term})",
            )

    def _on_conf(self, group: int, e: Entry) -> None:
        at, conf = self._conf[group]
        if e.index > at:
            self._conf[group] = (e.index, conf.apply(ConfChange.decode(e.data)))
            self.check_durability(group)

    # -- acknowledgements and durability ----------------------------------------------------------
    def on_ack(self, ack: Ack) -> None:
        """An entry was acknowledged to a client: it must be durable on enough voters now."""
        bisect.insort(self._acked[ack.group], (ack.index, ack), key=_index_of)
        self._check_entry(ack)

    def check_durability(self, group: int) -> None:
        """Re-check every acknowledged entry of ``group`` (after a truncating sync or a
        configuration change).

        Entries at or below the index that enough voters hold under durable snapshots are held
        by them for good (snapshots never move back): they are dropped from later re-checks.
        """
        voters = self.conf(group).voters
        n = len(voters)
        need = n - quorum_size(n) + 1
        ordered = sorted((self._snap_index(v, group) for v in voters), reverse=True)
        floor = self._durable_floor[group]
        if len(ordered) >= need:
            floor = self._durable_floor[group] = max(floor, ordered[need - 1])
        for index, ack in self._acked[group]:
            if index > floor:
                self._check_entry(ack)

    def _check_entry(self, ack: Ack) -> None:
        voters = self.conf(ack.group).voters
        held = [v for v in voters if self._holds(v, ack.group, ack.index, ack.term)]
        lacking = len(voters) - len(held)
        if lacking >= quorum_size(len(voters)):
            raise SafetyViolation(
                "durability",
                f"g{ack.group} acknowledged entry {ack.index}/{ack.term} {ack.data!r} is durable "
                f"only on {held} of voters {list(voters)}",
            )
