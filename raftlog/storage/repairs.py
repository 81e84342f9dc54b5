"""The groups of a data directory whose replica here is being repaired: a small persisted record.

A group is marked when its stored state was found damaged (a WAL record before the tail, a
snapshot file, a state machine file: `raftlog.errors.is_storage_damage`) and its replica was
reset to be caught up again from a healthy one; the mark is cleared once the core has caught up
(`raftlog.core.raft.Raft.rejoining` ends). While marked, the group opens in the core's rejoin
mode at every start, so a restart in the middle of a repair still neither votes nor campaigns
with what it lacks.

File ``<directory>/repair.json`` (written with `atomic_write`, so a crash leaves the old or the
new record), JSON::

    {"format": "raftlog-repair", "version": 1,
     "groups": {"<group>": {"reason": "...", "since_ms": <wall ms>, "count": <n>}}}

``count`` is how many times the group was marked (a replica damaged again and again is
reported, never silently repaired forever). A file of a newer ``version`` is refused with
`NewerFormat`; a file that does not parse is `CorruptRecord` (the directory's state cannot be
trusted to say which groups are whole).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from raftlog.errors import CorruptRecord, NewerFormat
from raftlog.storage.files import atomic_write, fsync_dir

REPAIR_FILE = "repair.json"
REPAIR_FORMAT = "raftlog-repair"
REPAIR_VERSION = 1
"""The layout this release writes and reads."""


@dataclass(frozen=True, slots=True)
class RepairMark:
    """Why a group's replica is being repaired, since when (wall ms), and how many times it
    has been marked in all."""

    reason: str
    since_ms: int
    count: int = 1


def decode_marks(path: str, raw: bytes) -> dict[int, RepairMark]:
    """Parse the bytes of a repair file (``path`` names it in errors)."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != REPAIR_FORMAT:
            raise ValueError("not a repair record")
        version = doc.get("version")
        if not isinstance(version, int):
            raise ValueError("no version")
        if version > REPAIR_VERSION:
            raise NewerFormat(path, f"repair record version {version}", f"{REPAIR_VERSION}")
        groups = doc["groups"]
        return {
            int(g): RepairMark(str(m["reason"]), int(m["since_ms"]), int(m.get("count", 1)))
            for g, m in groups.items()
        }
    except NewerFormat:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptRecord(path, 0, f"unreadable repair record: {e}") from None


def encode_marks(marks: Mapping[int, RepairMark]) -> bytes:
    """The file's bytes for ``marks`` (groups sorted, so equal marks give equal bytes)."""
    doc = {
        "format": REPAIR_FORMAT,
        "version": REPAIR_VERSION,
        "groups": {
            str(g): {"reason": m.reason, "since_ms": m.since_ms, "count": m.count}
            for g, m in sorted(marks.items())
        },
    }
    return json.dumps(doc, indent=1).encode()


class RepairMarks:
    """The repair record of one directory, kept in memory and written through on each change
    (thread-safe; `mark` and `clear` block on an fsync). ``directory=None`` keeps it in memory
    only: the twin for in-memory disks, which outlive their host as a directory does."""

    __slots__ = ("_lock", "_marks", "_path")

    def __init__(self, directory: str | None) -> None:
        self._path = "" if directory is None else os.path.join(directory, REPAIR_FILE)
        self._lock = threading.Lock()
        self._marks: dict[int, RepairMark] = {}
        if not self._path:
            return
        try:
            with open(self._path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            pass
        else:
            self._marks = decode_marks(self._path, raw)

    def marked(self) -> dict[int, RepairMark]:
        """Every marked group (a copy)."""
        with self._lock:
            return dict(self._marks)

    def mark(self, group: int, reason: str, now_ms: int) -> RepairMark:
        """Mark ``group`` (durable when this returns); a group already marked keeps its
        ``since_ms`` and counts one more."""
        with self._lock:
            old = self._marks.get(group)
            mark = RepairMark(
                reason,
                old.since_ms if old is not None else now_ms,
                (old.count + 1) if old is not None else 1,
            )
            self._marks[group] = mark
            self._write()
            return mark

    def clear(self, group: int) -> RepairMark | None:
        """Unmark ``group`` (durable when this returns); its mark, if it had one."""
        with self._lock:
            old = self._marks.pop(group, None)
            if old is not None:
                self._write()
            return old

    def _write(self) -> None:
        if not self._path:
            return
        if self._marks:
            atomic_write(self._path, encode_marks(self._marks))
        else:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                return
            fsync_dir(os.path.dirname(self._path))
