"""Bookkeeping that decides when a WAL segment may be deleted and what a new segment's head holds.

Invariants maintained by the owner (the WAL writer thread, or recovery while replaying):

- `SegmentIndex.note` is called for every record in write (replay) order, with the segment it
  went to.
- A segment may be deleted when, for every group, every entry of that group in the segment is at
  or below the group's durable snapshot index (or was voided by a later installed snapshot or a
  DROP). Only a prefix of the segments is ever deleted, oldest first.
- Each new segment starts with `head_records`: the latest snapshot marker, conf and hard state of
  every live group. Hence the newest segment always holds (a copy of) each group's latest
  metadata, and deleting older segments never loses it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from raftlog.core.types import ConfState, HardState, SnapshotMeta
from raftlog.storage.record import (
    ConfRecord,
    DropRecord,
    EntriesRecord,
    HardStateRecord,
    Record,
    SnapshotRecord,
)


@dataclass(frozen=True, slots=True)
class GroupHead:
    """The latest metadata recorded for one group (``None``: never recorded)."""

    hard_state: HardState | None = None
    snapshot: SnapshotMeta | None = None
    conf: ConfState | None = None

    def snapshot_index(self) -> int:
        return self.snapshot.index if self.snapshot is not None else 0


class SegmentIndex:
    """Per segment, the highest entry index of each group in it; per group, its `GroupHead`.

    Not thread-safe: the owner serialises access.
    """

    __slots__ = ("_heads", "_max_index")

    def __init__(self) -> None:
        # segment seq -> group -> highest entry index of that group written to the segment.
        self._max_index: dict[int, dict[int, int]] = {}
        self._heads: dict[int, GroupHead] = {}

    def add_segment(self, seq: int) -> None:
        self._max_index.setdefault(seq, {})

    def remove_segment(self, seq: int) -> None:
        self._max_index.pop(seq, None)

    def segments(self) -> list[int]:
        return sorted(self._max_index)

    def groups(self) -> list[int]:
        return sorted(self._heads)

    def head(self, group: int) -> GroupHead | None:
        return self._heads.get(group)

    def note(self, seq: int, group: int, record: Record) -> None:
        """Account for ``record`` of ``group`` having been written to segment ``seq``."""
        if isinstance(record, DropRecord):
            self._heads.pop(group, None)
            for per_group in self._max_index.values():
                per_group.pop(group, None)
            return
        head = self._heads.get(group, GroupHead())
        if isinstance(record, EntriesRecord):
            per_group = self._max_index.setdefault(seq, {})
            last = record.entries[-1].index
            if last > per_group.get(group, 0):
                per_group[group] = last
        elif isinstance(record, HardStateRecord):
            head = replace(head, hard_state=record.hard_state)
        elif isinstance(record, ConfRecord):
            head = replace(head, conf=record.conf)
        elif record.meta.index > head.snapshot_index():
            # A snapshot carries the configuration in force at its index (a restart resumes
            # from it), whether this node created it or installed it.
            head = replace(head, snapshot=record.meta, conf=record.meta.conf)
            if record.installed:
                # An installed snapshot voids every entry of the group written before it.
                for per_group in self._max_index.values():
                    per_group.pop(group, None)
        self._heads[group] = head

    def pinning_groups(self, seq: int) -> list[int]:
        """Groups whose unsnapshotted entries keep segment ``seq`` alive, sorted."""
        per_group = self._max_index.get(seq, {})
        pins = []
        for group, last in per_group.items():
            head = self._heads.get(group)
            if head is None or last > head.snapshot_index():
                pins.append(group)
        return sorted(pins)

    def head_records(self) -> list[tuple[int, Record]]:
        """Records restating every live group's latest metadata, for the head of a new segment.

        The snapshot marker is written as *created* (not installed): replayed after the original
        marker it is a no-op, and replayed first it simply sets the snapshot point.
        """
        out: list[tuple[int, Record]] = []
        for group in sorted(self._heads):
            head = self._heads[group]
            if head.snapshot is not None:
                out.append((group, SnapshotRecord(head.snapshot, installed=False)))
            if head.conf is not None:
                out.append((group, ConfRecord(head.conf)))
            if head.hard_state is not None:
                out.append((group, HardStateRecord(head.hard_state)))
        return out
