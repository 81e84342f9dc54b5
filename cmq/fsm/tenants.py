"""Fair queues (pure): the ready messages of a standard queue by tenant, `TenantIndex`.

On a standard queue a message's group id (SQS ``MessageGroupId``) names its *tenant*; the
messages without one form one tenant of their own, named ``""`` here (a group id is never
empty). A `Lease` of N takes its messages round-robin over the tenants that have a ready message,
in name order, starting after the tenant the previous pick was from (the *cursor*), the lowest
seq within a tenant; so a tenant with a backlog of a million messages gets one message per turn,
as does every other tenant with a ready message. Priorities stay strict: a message with a level
above 0 has no tenant (refused at send) and is taken first (`cmq.fsm.ready`).

The index holds

* ``members[t]``: the live messages of each named tenant (replicated: data group images of
  version 6, flag ``fair_queues``), and ``of`` (derived), each such message's tenant;
* ``cursor``: the tenant the last pick was from (replicated, in the same image part). It is reset
  to None (start from the first tenant) whenever a named tenant appears while none is live, so a
  replica restored from an image that holds no tenants agrees with one that replayed the log;
* ``ready_by[t]`` (derived): the ready messages of each tenant with one (``""`` included), and
  ``active``: those tenants' names, sorted.

A queue gets a `TenantIndex` only from its first message with a group id (`ReadyIndex.tenants`
is None until then), so queues without group ids pay nothing. The cost per leased message is a
bisect over the active tenants and a bitmap ``min``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from pyroaring import BitMap64

__all__ = ["TenantIndex"]

UNNAMED = ""
"""The tenant of the messages without a group id."""


class TenantIndex:
    """See the module docstring."""

    __slots__ = ("active", "cursor", "members", "of", "ready_by")

    def __init__(self) -> None:
        self.members: dict[str, BitMap64] = {}
        self.of: dict[int, str] = {}
        self.cursor: str | None = None
        self.ready_by: dict[str, BitMap64] = {}
        self.active: list[str] = []

    # -- membership (replicated) -----------------------------------------------------------------
    def join(self, seq: int, tenant: str) -> None:
        """The live message ``seq`` (not yet ready) belongs to the named ``tenant``."""
        if not self.members:
            self.cursor = None  # as a replica restored from an image without tenants has it
        bits = self.members.get(tenant)
        if bits is None:
            bits = self.members[tenant] = BitMap64()
        bits.add(seq)
        self.of[seq] = tenant

    def leave(self, seq: int) -> None:
        """``seq`` is deleted: no longer a member (nor ready)."""
        self.unready(seq)
        tenant = self.of.pop(seq, None)
        if tenant is not None:
            bits = self.members[tenant]
            bits.discard(seq)
            if not bits:
                del self.members[tenant]

    def leave_below(self, end_seq: int) -> None:
        """Every message below ``end_seq`` is deleted."""
        for tenant in list(self.ready_by):
            bits = self.ready_by[tenant]
            bits.remove_range(0, end_seq)
            if not bits:
                self._drop_active(tenant)
        for tenant in list(self.members):
            bits = self.members[tenant]
            span = BitMap64()
            span.add_range(0, end_seq)
            for seq in bits & span:
                self.of.pop(seq, None)
            bits.remove_range(0, end_seq)
            if not bits:
                del self.members[tenant]

    def tenant_of(self, seq: int) -> str:
        """The tenant of the live message ``seq`` (``""``: none named)."""
        return self.of.get(seq, UNNAMED)

    def named(self) -> bool:
        """Whether a live message has a named tenant (the image then holds the index)."""
        return bool(self.members)

    def restore(self, members: dict[str, BitMap64], cursor: str | None) -> None:
        """Set the members and cursor from an image (before anything is ready)."""
        self.members = members
        self.of = {int(seq): t for t, bits in members.items() for seq in bits}
        self.cursor = cursor

    # -- readiness (derived) ---------------------------------------------------------------------
    def ready(self, seq: int) -> None:
        """``seq`` is ready."""
        tenant = self.of.get(seq, UNNAMED)
        bits = self.ready_by.get(tenant)
        if bits is None:
            bits = self.ready_by[tenant] = BitMap64()
            insort(self.active, tenant)
        bits.add(seq)

    def unready(self, seq: int) -> None:
        """``seq`` is not ready (whether it was or not)."""
        tenant = self.of.get(seq, UNNAMED)
        bits = self.ready_by.get(tenant)
        if bits is not None and seq in bits:
            bits.discard(seq)
            if not bits:
                self._drop_active(tenant)

    def ready_many(self, seqs: BitMap64) -> None:
        """Every seq of ``seqs`` is ready."""
        named = BitMap64()
        for tenant, bits in self.members.items():
            part = bits & seqs
            if part:
                named |= part
                self._ready_bits(tenant, part)
        rest = seqs - named if named else seqs
        if rest:
            self._ready_bits(UNNAMED, rest)

    def _ready_bits(self, tenant: str, seqs: BitMap64) -> None:
        bits = self.ready_by.get(tenant)
        if bits is None:
            self.ready_by[tenant] = BitMap64(seqs)
            insort(self.active, tenant)
        else:
            bits |= seqs

    def _drop_active(self, tenant: str) -> None:
        del self.ready_by[tenant]
        del self.active[bisect_left(self.active, tenant)]

    # -- the fair pick (replicated cursor) -------------------------------------------------------
    def next_tenant(self) -> str:
        """The tenant the next pick is from: the first active tenant after the cursor, in name
        order, wrapping around (IndexError when none is ready). Does not move the cursor."""
        active = self.active
        i = 0 if self.cursor is None else bisect_right(active, self.cursor)
        return active[i if i < len(active) else 0]

    def pick(self) -> int:
        """The ready seq a `Lease` takes next (the lowest of `next_tenant`); the cursor moves to
        its tenant."""
        tenant = self.next_tenant()
        self.cursor = tenant
        return self.ready_by[tenant].min()
