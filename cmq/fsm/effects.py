"""`Effects`: what the queue machine's commands record for others instead of acting on it
(pure). Apply calls nothing outside the machine; its handlers note here:

* the queues that changed (every command that changed a queue but `Lease`, which only hides
  messages; every queue, before and after, on restore): the host takes them after each batch
  of applies (`QueueMachine.take_changed`) and wakes the long polls waiting on them;
* the segments (and whole queues: segment None) no longer in the state, whose files may go only
  once no durable snapshot lists them: those released before a snapshot are removed by the
  next one (`QueueMachine.snapshot` calls `removable`), and until then they are *pending* on
  this replica (local, not replicated state).
"""

from __future__ import annotations

from cmq.fsm.cells import Segment

__all__ = ["Effects", "Released"]

Released = tuple[str, Segment | None]
"""(queue store key, the segment released, or None for the whole queue)."""


class Effects:
    """The effects recorded by applies (see the module docstring)."""

    __slots__ = ("_changed", "_released", "_releasing")

    def __init__(self) -> None:
        self._changed: set[str] = set()
        self._released: list[Released] = []
        """Released since the last snapshot."""
        self._releasing: list[Released] = []
        """Released before the last snapshot: the next snapshot removes their files."""

    # -- recorded by apply -------------------------------------------------------------------
    def change(self, name: str) -> None:
        """Queue ``name`` changed."""
        self._changed.add(name)

    def release(self, key: str, segment: Segment | None) -> None:
        """``segment`` of the queue stored as ``key`` (None: every file of that queue) is no
        longer in the state."""
        self._released.append((key, segment))

    # -- taken by the host -------------------------------------------------------------------
    def take_changed(self) -> set[str]:
        """The queues changed since the last call (bounded by the queue names, so a machine
        nobody drains does not grow without limit)."""
        changed, self._changed = self._changed, set()
        return changed

    def removable(self) -> list[Released]:
        """At a snapshot (the previous one being durable): the files released before the
        previous snapshot, which no durable snapshot lists any more; those released since wait
        for the next one."""
        due, self._releasing, self._released = self._releasing, self._released, []
        return due

    def forget_releases(self) -> None:
        """On restore: the state is replaced, and recovery removes whatever files its layout
        does not list."""
        self._released, self._releasing = [], []

    # -- reads -------------------------------------------------------------------------------
    def pending(self, key: str) -> list[Segment]:
        """The segments of the queue stored as ``key`` whose files await removal here."""
        return [s for k, s in (*self._releasing, *self._released) if k == key and s is not None]

    def files_pending(self) -> bool:
        """Whether any segment file (or a deleted queue's) awaits removal."""
        return bool(self._released or self._releasing)
