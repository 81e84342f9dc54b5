"""The ready messages of one queue by priority level (pure): `ReadyIndex`.

A message's priority is a level, 0 (the lowest, the default) up to `MAX_PRIORITY`; a `Lease`
takes the highest level that has a ready message, lowest seq first within it (strict
priorities). The index holds

* ``all``: every ready seq (visible, not leased, not waiting for the dead-letter queue), in one
  `BitMap64`, as before priorities existed;
* ``members[l]`` for each level l >= 1: the *live* messages sent at level l (replicated state:
  written in data group images of version 5, flag ``message_priorities``); a live message in
  none of them is at level 0;
* ``hi[l]`` (derived): ``all`` & ``members[l]``, the ready messages of level l >= 1.

While no message has had a level above 0 (every queue with ``priorities`` 1), ``members`` and
``hi`` are empty lists and `add`, `discard` and `remove` *are* ``all``'s bound methods (no
wrapper on the apply path); hot paths test ``all`` directly (membership, emptiness) and take
``all.min()`` for `first`. The levels exist lazily, from the first message sent above level 0, so
a queue's ``priorities`` attribute may change at any time: it bounds the levels new messages may
take; messages keep the level they were sent with.

Fair queues (`cmq.fsm.tenants`): ``tenants`` is None until a message of a standard queue has a
group id; from then on `add`, `discard` and `remove` keep the tenants' ready sets too, and
`first` (for a `Lease`: `pick`) serves level 0 round-robin over the tenants. Levels above 0 come
first, strictly, as before (their messages have no tenant).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from pyroaring import BitMap64

from cmq.fsm.tenants import TenantIndex

__all__ = ["MAX_PRIORITY", "ReadyIndex"]

MAX_PRIORITY = 31
"""The highest level (a queue has at most 32: ``priorities`` 1 .. 32)."""


class ReadyIndex:
    """See the module docstring. ``members[0]`` and ``hi[0]`` are unused (always empty), so a
    level indexes both lists."""

    __slots__ = ("add", "all", "discard", "hi", "members", "remove", "tenants")

    def __init__(self) -> None:
        self.all = BitMap64()
        self.members: list[BitMap64] = []
        self.hi: list[BitMap64] = []
        self.tenants: TenantIndex | None = None
        """The ready messages by tenant (`cmq.fsm.tenants`), from the first group id on."""
        self.add: Callable[[int], None] = self.all.add
        """``seq`` is ready."""
        self.discard: Callable[[int], None] = self.all.discard
        """``seq`` is not ready (whether it was or not)."""
        self.remove: Callable[[int], None] = self.all.remove
        """Like `discard`, but ``seq`` must be ready (KeyError otherwise)."""

    def _leveled(self) -> None:
        """From now on `add`, `discard` and `remove` keep ``hi`` too."""
        self.add, self.discard, self.remove = self._add, self._discard, self._remove

    # -- levels (replicated) ---------------------------------------------------------------------
    def leveled(self) -> bool:
        """Whether some live message has a level above 0."""
        return any(self.members)

    def top(self) -> int:
        """The highest level a live message has (0: none above 0)."""
        for level in range(len(self.members) - 1, 0, -1):
            if self.members[level]:
                return level
        return 0

    def set_level(self, seq: int, level: int) -> None:
        """The live message ``seq`` (not yet ready) was sent at ``level`` (1 .. `MAX_PRIORITY`;
        0 needs no call)."""
        members = self.members
        if not members:
            self._leveled()
        while len(members) <= level:
            members.append(BitMap64())
            self.hi.append(BitMap64())
        members[level].add(seq)
        if seq in self.all:
            self.hi[level].add(seq)

    def level_of(self, seq: int) -> int:
        """The level of the live message ``seq``."""
        members = self.members
        for level in range(len(members) - 1, 0, -1):
            if seq in members[level]:
                return level
        return 0

    def forget(self, seq: int) -> None:
        """``seq`` is deleted: neither ready nor a member of any level or tenant."""
        self.all.discard(seq)
        if self.tenants is not None:
            self.tenants.leave(seq)
        if self.members:
            for level in range(1, len(self.members)):
                self.members[level].discard(seq)
                self.hi[level].discard(seq)

    def forget_below(self, end_seq: int) -> None:
        """Every message below ``end_seq`` is deleted."""
        self.all.remove_range(0, end_seq)
        if self.tenants is not None:
            self.tenants.leave_below(end_seq)
        for bits in (*self.members, *self.hi):
            bits.remove_range(0, end_seq)

    def move(self, old: int, new: int) -> None:
        """The live message ``old`` is now ``new`` (copied forward), at the same level and
        readiness."""
        level = self.level_of(old)
        ready = old in self.all
        if self.tenants is not None and (tenant := self.tenants.of.get(old)) is not None:
            self.tenants.join(new, tenant)  # before old leaves: the cursor stays
        self.forget(old)
        if level:
            self.set_level(new, level)
        if ready:
            self.add(new)

    def level_bitmaps(self) -> list[BitMap64]:
        """``members[1:]`` without the trailing empty levels (the image's form)."""
        return self.members[1 : self.top() + 1]

    def restore_levels(self, members: list[BitMap64]) -> None:
        """Set the levels 1 .. len(``members``) from an image (before anything is ready)."""
        self.members = [BitMap64(), *members] if members else []
        self.hi = [BitMap64() for _ in self.members]
        if self.members:
            self._leveled()

    # -- tenants (replicated) --------------------------------------------------------------------
    def set_tenant(self, seq: int, tenant: str) -> None:
        """The live message ``seq`` (not yet ready, level 0) of a standard queue has the group
        id ``tenant`` (not empty)."""
        if self.tenants is None:
            self.tenants = TenantIndex()
            if self.all:
                self.tenants.ready_many(self.all)
            self._leveled()
        self.tenants.join(seq, tenant)

    def restore_tenants(self, members: dict[str, BitMap64], cursor: str | None) -> None:
        """Set the tenants from an image (before anything is ready; nothing when ``members`` is
        empty)."""
        if members:
            self.tenants = TenantIndex()
            self.tenants.restore(members, cursor)
            self._leveled()

    # -- readiness (derived) ---------------------------------------------------------------------
    def _add(self, seq: int) -> None:
        self.all.add(seq)
        if self.tenants is not None:
            self.tenants.ready(seq)
        for level in range(len(self.members) - 1, 0, -1):
            if seq in self.members[level]:
                self.hi[level].add(seq)
                return

    def _discard(self, seq: int) -> None:
        self.all.discard(seq)
        if self.tenants is not None:
            self.tenants.unready(seq)
        for bits in self.hi:
            bits.discard(seq)

    def _remove(self, seq: int) -> None:
        self.all.remove(seq)
        if self.tenants is not None:
            self.tenants.unready(seq)
        for bits in self.hi:
            bits.discard(seq)

    def add_range(self, lo: int, hi: int) -> None:
        """Every seq in [``lo``, ``hi``) is ready."""
        self.all.add_range(lo, hi)
        if self.members or self.tenants is not None:
            span = BitMap64()
            span.add_range(lo, hi)
            if self.tenants is not None:
                self.tenants.ready_many(span)
            for level in range(1, len(self.members)):
                self.hi[level] |= self.members[level] & span

    def update(self, seqs: BitMap64) -> None:
        """Every seq of ``seqs`` is ready."""
        self.all.update(seqs)  # in place: add/discard/remove may be its bound methods
        if self.tenants is not None:
            self.tenants.ready_many(seqs)
        for level in range(1, len(self.members)):
            self.hi[level] |= self.members[level] & seqs

    def __contains__(self, seq: int) -> bool:
        return seq in self.all

    def __len__(self) -> int:
        return len(self.all)

    def __bool__(self) -> bool:
        return bool(self.all)

    def __iter__(self) -> Iterator[int]:
        """The ready seqs in delivery order: highest level first, seq order within a level."""
        if not self.members:
            return iter(self.all)
        return self.ordered(self.all)

    def min(self) -> int:
        """The lowest ready seq (any level)."""
        return self.all.min()

    def first(self) -> int:
        """The ready seq a `Lease` takes next: the lowest of the highest level with one
        (ValueError when none is ready)."""
        for level in range(len(self.hi) - 1, 0, -1):
            if self.hi[level]:
                return self.hi[level].min()
        if self.tenants is not None:
            return self.tenants.ready_by[self.tenants.next_tenant()].min()
        return self.all.min()

    def pick(self) -> int:
        """`first`, for a `Lease` that takes it: a pick at level 0 of a queue with tenants moves
        the tenants' cursor (replicated state) to its tenant."""
        for level in range(len(self.hi) - 1, 0, -1):
            if self.hi[level]:
                return self.hi[level].min()
        if self.tenants is not None:
            return self.tenants.pick()
        return self.all.min()

    def ordered(self, seqs: BitMap64) -> Iterator[int]:
        """``seqs`` (live ones) in delivery order: by level, highest first, then by seq."""
        if not self.members:
            yield from seqs
            return
        rest = BitMap64(seqs)
        for level in range(len(self.members) - 1, 0, -1):
            here = seqs & self.members[level]
            if here:
                rest -= here
                yield from here
        yield from rest

    def by_level(self, levels: int, extra: Iterable[int] = ()) -> tuple[int, ...]:
        """How many messages are ready at each level 0 .. ``levels`` - 1 (a level above it
        counts at the top one), ``extra`` (seqs due but not yet made ready) included."""
        counts = [0] * levels
        above = 0
        for level in range(1, len(self.hi)):
            n = len(self.hi[level])
            counts[min(level, levels - 1)] += n
            above += n
        counts[0] += len(self.all) - above
        for seq in extra:
            counts[min(self.level_of(seq), levels - 1)] += 1
        return tuple(counts)
