"""Where a queue's messages live in memory (pure: no I/O, no clocks): `Segment`, a run of
consecutive seqs with the bitmaps of how each left and their send times, and `Touched`, the
cells of the live messages received at least once (visibility, lease, receive count, flags).
`cmq.fsm.queue.QueueState` holds one of each per queue; the image of both is `cmq.fsm.image`.
"""

from __future__ import annotations

from array import array

from pyroaring import BitMap

from cmq.model import OUTCOMES

PENDING_DEAD_LETTER = 1
"""Flag of a touched slot: the message waits for a `DeadLetter` (it is in ``pending_dl``)."""
ACKED, EXPIRED, DEAD_LETTERED, PURGED = range(4)
"""How a message left its queue (index into `cmq.model.OUTCOMES`)."""
# Cells of a touched slot.
SEQ, VIS, LEASE, COUNT, FLAGS = range(5)
WIDTH = 5


class Touched:
    """State of the live messages received at least once: one interleaved ``array('q')`` of
    `WIDTH` cells per slot (seq, visibility deadline, lease id, receive count, flags), so a
    snapshot copies it with one memcpy.

    Slots are dense: removing a message moves the last slot into its place. The order is a pure
    function of the command history, so equal histories give equal snapshot bytes.
    ``slot_of`` is derived (rebuilt on restore).
    """

    __slots__ = ("cells", "slot_of")

    def __init__(self) -> None:
        self.cells: array[int] = array("q")
        self.slot_of: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.slot_of)

    def seqs(self) -> array[int]:
        """The seq of every slot, in slot order (a copy)."""
        return self.cells[SEQ::WIDTH]

    def get(self, slot: int, field: int) -> int:
        return self.cells[slot * WIDTH + field]

    def set(self, slot: int, field: int, value: int) -> None:
        self.cells[slot * WIDTH + field] = value

    def add(self, seq: int) -> int:
        slot = len(self.slot_of)
        self.cells.extend((seq, 0, 0, 0, 0))
        self.slot_of[seq] = slot
        return slot

    def remove(self, seq: int) -> None:
        slot = self.slot_of.pop(seq, None)
        if slot is None:
            return
        last = len(self.slot_of)
        cells = self.cells
        if slot != last:
            at, src = slot * WIDTH, last * WIDTH
            cells[at : at + WIDTH] = cells[src : src + WIDTH]
            self.slot_of[cells[at + SEQ]] = slot
        del cells[last * WIDTH :]

    def clear(self) -> None:
        del self.cells[:]
        self.slot_of.clear()

    def reindex(self) -> None:
        self.slot_of = {seq: slot for slot, seq in enumerate(self.seqs())}


class Segment:
    """One segment of a queue: ``count`` records from ``first_seq``, ``size`` bytes, whose
    stored bytes have CRC-32 ``crc``.

    Each deleted record's outcome is kept for the archive: ``deleted`` minus the ``expired``,
    ``dead``, ``purged`` and ``moved`` (copied forward, not archived from here) bitmaps were
    acked; ``counts`` holds the final receive counts that differ from the default (1 for an
    acked message, else 0). A ``released`` segment (every record deleted, queue with
    ``archive``) stays until archived; ``claim`` is an archive batch's (batch id, expiry).
    ``sent_at`` holds per record the send time, except for the records that are copies of
    messages copied forward here (``copies``), whose entry repeats the previous one, or the
    creation time for the first (so the array stays sorted; see `QueueState.moved`).
    ``visible_from``: per record, the time it first became visible (its record's visibility:
    send time plus the send's delay; a copy's: its original's), kept only once a record of the
    segment differs from its send time (None: every record's equals it); retention counts from
    it (`cmq.fsm.timedwork.retention_start`).

    Rewind (`cmq.fsm.rewind`): ``replays`` are the records that are rewound copies of
    acknowledged messages (never archived: their originals are, from their own segments);
    ``archived``: a released segment the archive is done with (or that it never needed) but
    that the queue's ``retain_acked_seconds`` still keeps (`cmq.fsm.timedwork.retaining`)."""

    __slots__ = (
        "archived",
        "claim",
        "copies",
        "count",
        "counts",
        "crc",
        "created_ms",
        "dead",
        "deleted",
        "expired",
        "first_seq",
        "moved",
        "purged",
        "released",
        "replays",
        "sealed",
        "sent_at",
        "size",
        "visible_from",
    )

    def __init__(self, first_seq: int, created_ms: int) -> None:
        self.first_seq = first_seq
        self.created_ms = created_ms
        self.count = 0
        self.size = 0
        self.crc = 0
        self.sealed = False
        self.released = False
        self.archived = False
        self.claim: tuple[str, int] | None = None
        self.deleted = BitMap()
        self.expired = BitMap()
        self.dead = BitMap()
        self.purged = BitMap()
        self.moved = BitMap()
        self.copies = BitMap()
        self.replays = BitMap()
        self.counts: dict[int, int] = {}
        self.sent_at: array[int] = array("q")
        self.visible_from: array[int] | None = None

    def add_visible(self, visible_at: int, *, force: bool = False) -> None:
        """Record the first visibility of the record just appended (its ``sent_at`` entry
        already is); ``force``: keep the array even if it equals the send time (a copy)."""
        vf = self.visible_from
        if vf is not None:
            vf.append(visible_at)
        elif force or visible_at != self.sent_at[-1]:
            vf = self.visible_from = array("q", self.sent_at)
            vf[-1] = visible_at

    def full(self) -> bool:
        return len(self.deleted) >= self.count

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1

    def outcome_bitmap(self, outcome: int) -> BitMap | None:
        return (None, self.expired, self.dead, self.purged)[outcome]

    def record(self, rel: int, outcome: int, receive_count: int) -> None:
        """Record how the just-deleted record ``rel`` left and its final receive count."""
        bits = self.outcome_bitmap(outcome)
        if bits is not None:
            bits.add(rel)
        if receive_count != (1 if outcome == ACKED else 0):
            self.counts[rel] = receive_count

    def outcome_of(self, rel: int) -> tuple[str, int] | None:
        """(outcome name, receive count) of deleted record ``rel``; None if copied forward or
        a rewound copy (neither is archived from here)."""
        if rel in self.moved or rel in self.replays:
            return None
        outcome = ACKED
        for o, bits in ((EXPIRED, self.expired), (DEAD_LETTERED, self.dead), (PURGED, self.purged)):
            if rel in bits:
                outcome = o
                break
        return OUTCOMES[outcome], self.counts.get(rel, 1 if outcome == ACKED else 0)

    def archivable(self) -> int:
        """Records the archive stream of this segment carries (copied forward ones and
        rewound copies excluded)."""
        if not self.replays:
            return self.count - len(self.moved)
        return self.count - len(self.moved | self.replays)

    def state(self) -> str:
        if self.archived:
            return "archived_pending"  # kept for rewinds until `timedwork.retaining` ends
        if self.released:
            return "released"
        return "sealed" if self.sealed else "active"
