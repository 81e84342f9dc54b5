"""A segment record's priority level (flags bit 1, a ``u8`` after the flags byte): written only
for a level above 0 (a record without one keeps the layout of release 0.1.0), read back by every
decoder, covered by the record CRC, kept by a `Tidy` copy and by the records a restore reads,
and dropped (level 0) by a rewound copy."""

from __future__ import annotations

import pytest

from cmq.errors import InvalidParameter, InvariantBroken
from cmq.fsm import (
    Ack,
    CreateQueue,
    Lease,
    MemorySegmentStore,
    Nack,
    NewMessage,
    QueueMachine,
    Rewind,
    Tidy,
)
from cmq.fsm.commands import Leased, Rewound, Tidied
from cmq.fsm.rewind import REWIND_MAX
from cmq.fsm.store import (
    FLAG_PRIORITY,
    FRAME,
    StoredMessage,
    decode_payload,
    encode_record,
    record_tail,
    with_priority,
)
from cmq.model import QueueAttributes

from .harness import sent

T0 = 1_700_000_000_000


def stored(priority: int, binary: bool = False) -> StoredMessage:
    return StoredMessage("m-1", 9, b"body", binary, (("k", "v"),), T0, priority)


def payload(frame: bytes) -> memoryview:
    return memoryview(frame)[FRAME.size :]


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("priority", [0, 1, 31, 255])
def test_a_record_round_trips_with_and_without_a_level(priority: int, binary: bool) -> None:
    m = stored(priority, binary)
    frame = encode_record(m, T0 + 5)
    assert decode_payload(payload(frame)) == (m, T0 + 5)
    flags = frame[FRAME.size + 24]
    assert bool(flags & FLAG_PRIORITY) == (priority > 0)
    if priority:  # one byte more than the same message without a level, right after the flags
        plain = encode_record(stored(0, binary), T0 + 5)
        assert len(frame) == len(plain) + 1 and frame[FRAME.size + 25] == priority


def test_a_record_without_a_level_keeps_the_layout_it_had() -> None:
    tail = record_tail("m-1", False, (("k", "v"),), b"body")
    assert tail == record_tail("m-1", False, (("k", "v"),), b"body", 0)
    assert tail[0] == 0 and tail[1:5] == (3).to_bytes(4, "little")
    assert with_priority(tail, 4) == record_tail("m-1", False, (("k", "v"),), b"body", 4)


def test_a_level_outside_a_byte_or_a_flag_with_level_0_is_refused() -> None:
    with pytest.raises(InvalidParameter, match="priority 256"):
        record_tail("m", False, (), b"", 256)
    frame = bytearray(encode_record(stored(3), T0))
    frame[FRAME.size + 25] = 0  # the flag says a level follows; level 0 is never written
    with pytest.raises(InvalidParameter, match="level 0"):
        decode_payload(payload(bytes(frame)))


def test_a_flipped_byte_in_the_level_is_caught_by_the_record_crc() -> None:
    store = MemorySegmentStore(cache_bytes=0)
    msgs = [stored(2), StoredMessage("m-2", 10, b"b", False, (), T0, 5)]
    store.append("q", 9, msgs, [encode_record(m, T0) for m in msgs])
    assert store.read("q", 9, 10) == msgs[1]
    first = len(encode_record(msgs[0], T0))
    store.segments[("q", 9)][first + FRAME.size + 25] ^= 0x01  # the second record's level
    with pytest.raises(InvariantBroken, match="checksum mismatch"):
        store.read("q", 9, 10)


def leveled_machine(store: MemorySegmentStore) -> QueueMachine:
    m = QueueMachine(store)
    attrs = QueueAttributes(visibility_timeout=30, priorities=8)
    m.execute(CreateQueue("q", attrs, T0, segment_bytes=1200, segment_age_ms=3_600_000))
    return m


def produce(m: QueueMachine, now: int, levels: list[int]) -> list[int]:
    msgs = tuple(
        NewMessage(f"m{i}", b"x", False, (), None, None, None, None, lv)
        for i, lv in enumerate(levels)
    )
    return sent(m.execute, "q", now, msgs)


def test_a_produced_record_carries_its_level_and_a_tidy_copy_keeps_it() -> None:
    store = MemorySegmentStore(cache_bytes=0)
    m = leveled_machine(store)
    levels = [0] * 7 + [3] + [5] + [0] * 55
    seqs = produce(m, T0, levels)
    # Read back from the bytes (no cache): each record holds the level it was sent at.
    store.write_out()  # as after every batch of applies
    assert [x.priority for x in m.read("q", seqs[:9])] == levels[:9]
    taken = []
    for t in range(1, 8):
        got = m.execute(Lease("q", T0 + t, 10, 30_000))
        assert isinstance(got, Leased)
        taken += [(x.seq, x.lease_id) for x in got.messages]
    # Ack every level-0 message of the first segment: the two leveled ones are copied forward.
    keep = {seqs[7], seqs[8]}
    m.execute(Nack("q", T0 + 8, tuple(t for t in taken if t[0] in keep), 0))
    first = m.segments("q")[0]  # type: ignore[index]
    end = first.first_seq + first.count
    assert seqs[8] < end < seqs[-1]
    m.execute(Ack("q", T0 + 9, tuple((s, lid) for s, lid in taken if s < end and s not in keep)))
    tidied = m.execute(Tidy("q", T0 + 10))
    assert isinstance(tidied, Tidied) and tidied.copied >= 2
    store.write_out()
    # Peeked from the records (the store caches nothing): the copies' records keep the level.
    copies = {msg.id: msg for msg in m.peek("q", 40) if msg.id in ("m7", "m8")}
    assert {k: v.priority for k, v in copies.items()} == {"m7": 3, "m8": 5}
    assert all(c.seq not in (seqs[7], seqs[8]) for c in copies.values())
    assert m.priorities("q", [c.seq for c in copies.values()]) == {
        c.seq: c.priority for c in copies.values()
    }
    # A restore reads the records back; the per-level index agrees with the records.
    m.restore(2, m.snapshot())
    store.drop_cache()
    live = m.peek("q", 40)
    assert m.priorities("q", [x.seq for x in live]) == {
        x.seq: x.priority for x in live if x.priority
    }


def test_a_rewound_copy_of_a_leveled_message_is_recorded_at_level_0() -> None:
    store = MemorySegmentStore(cache_bytes=0)
    m = QueueMachine(store)
    attrs = QueueAttributes(visibility_timeout=30, priorities=8, retain_acked_seconds=86_400)
    m.execute(CreateQueue("q", attrs, T0))
    (seq,) = produce(m, T0, [4])
    got = m.execute(Lease("q", T0 + 1, 10, 30_000))
    assert isinstance(got, Leased) and [x.seq for x in got.messages] == [seq]
    m.execute(Ack("q", T0 + 2, ((seq, got.messages[0].lease_id),)))
    out = m.execute(Rewind("q", T0 + 3, T0, 0, REWIND_MAX))
    assert isinstance(out, Rewound) and out.count == 1
    store.write_out()
    (copy,) = m.peek("q", 10)  # read from its record (the store caches nothing)
    assert copy.id == "m0" and copy.seq != seq and copy.priority == 0
    assert m.priorities("q", [copy.seq]) == {}  # the live index agrees: level 0
