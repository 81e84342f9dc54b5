"""The snapshot image of the queue machine, and its self-contained "shipped" form (pure).

Image layout: ``CMQF``, version, incarnation counter, queue count, then per queue (sorted by name):
name, attributes, incarnation, clock, counters and segment limits, the clock's skew and its slew
stamp (version 3 only: version 2 has no skew); segments (first seq, count, size, sealed, created,
deleted bitmap, released, CRC-32; the outcome bitmaps expired, dead-lettered, purged and moved, the
copies bitmap, receive-count exceptions, the archive claim); the touched cells; the messages copied
forward (seq, send time, earlier seqs); the dedup window; for a FIFO queue, each live message's
group and deduplication id and the remembered receive attempts; (version 4) the time-to-live
deadlines as (seq, deadline) pairs by seq; (version 5) the priority levels: a count n, then
for each level 1 .. n the portable roaring bitmap (64-bit) of its live messages' seqs (level 0:
the others); (version 6) per segment, after its claim, a byte of flags (1: archived, kept for
rewinds) and the bitmap of rewound copies; (version 7) the fair queues' tenants: a u32 count n,
then for each named tenant by name its name and the portable roaring bitmap (64-bit) of its live
messages' seqs, then the cursor (an optional text). Equal states give equal bytes
(replicas compare images at equal applied index).

Shipped form (for a follower that lacks the segment files): ``CMQSHIP1``, image length, segment
count, the image, then per segment its key length, first seq, size and CRC-32, key and bytes.

Versions: the image's version byte (`READABLE_IMAGE_VERSIONS`; 0.1.0 wrote version 2) and the
shipped form's magic, whose last byte is its version (``1``). A newer image version, or a
shipped magic ``CMQSHIP`` with another last byte, raises `NewerFormat` naming both versions
(`decode_image`, `install_shipped`); anything else malformed is `InvariantBroken`.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from array import array
from collections.abc import Iterable

from pyroaring import BitMap, BitMap64

from cmq.errors import InvalidParameter, InvariantBroken, NewerFormat, NewerLayout
from cmq.fsm.cells import WIDTH, Segment
from cmq.fsm.commands.codec import read_attributes
from cmq.fsm.fifo_state import FifoState
from cmq.fsm.queue import QueueState
from cmq.fsm.store import SegmentStore
from cmq.fsm.wire import Reader, Writer

IMAGE_MAGIC = b"CMQF"
IMAGE_VERSION = 7
"""The newest layout. An image is written as version 2 while no queue has a clock skew or a
message with a time to live (so a release that reads only version 2 still reads it), as version
3 once one has a skew, as version 4 (version 3 plus, per queue, the live messages' time-to-live
deadlines; flag ``message_ttl``) once one has such a message, as version 5 (version 4 plus, per
queue, the live messages' priority levels; flag ``message_priorities``) once a live message has
a priority above 0, as version 6 (version 5 plus, per segment, the archived-but-retained flag
and the rewound copies; flag ``rewind``) once a segment has either, as version 7 (version 6 plus,
per queue, the tenants of a standard queue's live messages with a group id, and the fair cursor;
flag ``fair_queues``) once one has such a message."""
READABLE_IMAGE_VERSIONS = (2, 3, 4, 5, 6, 7)
_SEG_ARCHIVED = 1
"""Version 6 segment flag: archived (or not to be archived), kept for rewinds."""

_IMAGE_HEAD = struct.Struct("<BqI")
_QUEUE_HEAD = struct.Struct("<14qI")
_QUEUE_HEAD_V2 = struct.Struct("<12qI")
"""incarnation, created, the `_COUNTERS`, segment bytes and age, (3 and later: skew and its
stamp,) the number of segments."""
_COUNTERS = (
    "clock",
    "next_seq",
    "lease_counter",
    "live",
    "sent_total",
    "acked_total",
    "dead_lettered_total",
    "expired_total",
)
"""The `QueueState` fields a queue's head holds after its incarnation and creation time."""
_SEGMENT_HEAD = struct.Struct("<qqqBqIBI")
"""first seq, count, size, sealed, created, deleted bitmap length, released, crc."""
_CLAIM_TAIL = struct.Struct("<q")
_DEDUP_TAIL = struct.Struct("<qq")
SHIPPED_MAGIC = b"CMQSHIP1"
SHIPPED_FAMILY = b"CMQSHIP"
"""The shipped form's magic without its version byte: data starting with it is a shipped
image (of this version, or of a newer one this release refuses)."""
_SHIPPED_HEAD = struct.Struct("<QI")  # light image length, segment count
_SHIPPED_SEGMENT = struct.Struct("<HqQI")  # key length, first seq, size, crc32


def image_version(queues: Iterable[QueueState]) -> int:
    """The version an image of ``queues`` is written in (see `IMAGE_VERSION`)."""
    queues = list(queues)
    if any(q.ready.tenants is not None and q.ready.tenants.named() for q in queues):
        return 7
    if any(seg.archived or seg.replays for q in queues for seg in q.segments):
        return 6
    if any(q.ready.leveled() for q in queues):
        return 5
    if any(q.ttl for q in queues):
        return 4
    return 3 if any(q.skew for q in queues) else 2


def image_head(incarnations: int, queues: int, version: int = IMAGE_VERSION) -> bytes:
    """The bytes before the queues' parts."""
    return IMAGE_MAGIC + _IMAGE_HEAD.pack(version, incarnations, queues)


def decode_image(data: bytes) -> tuple[int, dict[str, QueueState]]:
    """(incarnation counter, queues by name) of an image; `NewerFormat` if a newer release wrote
    it, `InvariantBroken` if malformed."""
    try:
        return decode_queues(Reader(data))
    except NewerLayout as e:
        raise NewerFormat(f"snapshot image: {e}") from None
    except InvalidParameter as e:
        raise InvariantBroken(f"undecodable snapshot image: {e}") from None


def ship(data: bytes, queues: Iterable[QueueState], store: SegmentStore) -> bytes:
    """The shipped form of the image ``data`` (whose queues are ``queues``): the image plus
    every segment it lists, read from ``store`` up to its recorded size."""
    parts = [SHIPPED_MAGIC, b"", data]
    count = 0
    for q in queues:
        key = q.key.encode()
        for seg in q.segments:
            blob = store.export(q.key, seg.first_seq, seg.size)
            crc = zlib.crc32(blob)
            parts.append(_SHIPPED_SEGMENT.pack(len(key), seg.first_seq, seg.size, crc))
            parts.append(key)
            parts.append(blob)
            count += 1
    parts[1] = _SHIPPED_HEAD.pack(len(data), count)
    return b"".join(parts)


def segments_digest(queues: Iterable[QueueState], store: SegmentStore) -> tuple[str, int]:
    """(SHA-256 hex, count) over every segment of ``queues`` (an image's, in its order): each
    one's queue key, first seq, size and bytes up to that size. Replicas at the same applied
    index must agree. Reads files only; a segment missing or short: `InvariantBroken`."""
    digest = hashlib.sha256()
    count = 0
    for q in queues:
        for seg in q.segments:
            digest.update(f"{q.key}\0{seg.first_seq}\0{seg.size}\0".encode())
            digest.update(store.export(q.key, seg.first_seq, seg.size))
            count += 1
    return digest.hexdigest(), count


def install_shipped(data: bytes, store: SegmentStore) -> bytes:
    """Write the segments of a shipped image into ``store``; return the plain image. A shipped
    form of a newer version is `NewerFormat` (before anything is written)."""
    if not data.startswith(SHIPPED_MAGIC):
        found = data[len(SHIPPED_FAMILY) : len(SHIPPED_MAGIC)]
        raise NewerFormat(
            f"shipped snapshot: version {found!r} (magic {bytes(data[: len(SHIPPED_MAGIC)])!r}) "
            f"is from a newer release than this one, which reads version "
            f"{SHIPPED_MAGIC[-1:]!r} (magic {SHIPPED_MAGIC!r})"
        )
    view = memoryview(data)
    pos = len(SHIPPED_MAGIC)
    try:
        image_len, count = _SHIPPED_HEAD.unpack_from(view, pos)
        pos += _SHIPPED_HEAD.size
        image = bytes(view[pos : pos + image_len])
        pos += image_len
        for _ in range(count):
            key_len, first, size, crc = _SHIPPED_SEGMENT.unpack_from(view, pos)
            pos += _SHIPPED_SEGMENT.size
            key = bytes(view[pos : pos + key_len]).decode()
            pos += key_len
            blob = bytes(view[pos : pos + size])
            pos += size
            if len(blob) != size or zlib.crc32(blob) != crc:
                raise InvariantBroken(f"shipped segment {key}/{first} fails its checksum")
            store.install(key, first, blob)
    except (struct.error, UnicodeDecodeError) as e:
        raise InvariantBroken(f"malformed shipped snapshot: {e}") from None
    if pos != len(view) or len(image) != image_len:
        raise InvariantBroken("malformed shipped snapshot: length mismatch")
    return image


def canonical_bits(bm: BitMap) -> bytes:
    """``bm`` serialized so that equal sets give equal bytes whatever their history: a bitmap
    grown from a run container can serialize differently from one built fresh (another
    format cookie), and replicas must encode identical images at equal applied index."""
    fresh = BitMap(bm.to_array())
    fresh.run_optimize()
    return bytes(fresh.serialize())


def canonical_bits64(bm: BitMap64) -> bytes:
    """`canonical_bits` of a 64-bit bitmap."""
    fresh = BitMap64(array("Q", bm.to_array()))
    fresh.run_optimize()
    return bytes(fresh.serialize())


def encode_queue(q: QueueState, version: int = IMAGE_VERSION) -> bytes:
    """The part of an image of version ``version`` that holds ``q``."""
    w = Writer()
    w.raw(q.head)
    skew = (q.skew, q.skew_stamp) if version >= 3 else ()
    if version < 3 and q.skew:
        raise InvariantBroken(f"queue {q.name!r} has a clock skew: not writable as version 2")
    w.raw(
        (_QUEUE_HEAD if version >= 3 else _QUEUE_HEAD_V2).pack(
            q.incarnation,
            q.created_ms,
            *(getattr(q, f) for f in _COUNTERS),
            q.segment_bytes,
            q.segment_age_ms,
            *skew,
            len(q.segments),
        )
    )
    for seg in q.segments:
        bits = canonical_bits(seg.deleted)
        w.raw(
            _SEGMENT_HEAD.pack(
                seg.first_seq,
                seg.count,
                seg.size,
                int(seg.sealed),
                seg.created_ms,
                len(bits),
                int(seg.released),
                seg.crc,
            )
        )
        w.raw(bits)
        for extra in (seg.expired, seg.dead, seg.purged, seg.moved, seg.copies):
            w.blob(canonical_bits(extra))
        w.int_array(array("q", [x for rel in sorted(seg.counts) for x in (rel, seg.counts[rel])]))
        w.opt_text(None if seg.claim is None else seg.claim[0])
        if seg.claim is not None:
            w.raw(_CLAIM_TAIL.pack(seg.claim[1]))
        if version >= 6:
            w.u8(_SEG_ARCHIVED if seg.archived else 0)
            w.blob(canonical_bits(seg.replays))
        elif seg.archived or seg.replays:
            raise InvariantBroken(f"queue {q.name!r} has rewind state: version 6 or later")
    w.int_array(q.touched.cells)
    w.u32(len(q.moved))
    for seq in sorted(q.moved):
        sent, olds = q.moved[seq]
        w.raw(_DEDUP_TAIL.pack(seq, sent))
        w.int_array(array("q", olds))
    w.u32(len(q.dedup))
    for dedup_id, (mid, seq, at) in q.dedup.items():
        w.text(dedup_id)
        w.text(mid)
        w.raw(_DEDUP_TAIL.pack(seq, at))
    if q.fifo is not None:
        _encode_fifo(w, q.fifo)
    if version >= 4:
        w.int_array(array("q", [x for seq in sorted(q.ttl) for x in (seq, q.ttl[seq])]))
    elif q.ttl:
        raise InvariantBroken(f"queue {q.name!r} has time-to-live deadlines: version 4 or later")
    levels = q.ready.level_bitmaps()
    if version >= 5:
        w.u8(len(levels))
        for members in levels:
            w.blob(canonical_bits64(members))
    elif levels:
        raise InvariantBroken(f"queue {q.name!r} has messages with priorities: version 5 or later")
    tenants = q.ready.tenants
    named = tenants is not None and tenants.named()
    if version >= 7:
        if tenants is None or not named:
            w.u32(0)
            w.opt_text(None)
        else:
            w.u32(len(tenants.members))
            for name in sorted(tenants.members):
                w.text(name)
                w.blob(canonical_bits64(tenants.members[name]))
            w.opt_text(tenants.cursor)
    elif named:
        raise InvariantBroken(f"queue {q.name!r} has messages with tenants: version 7 or later")
    return w.getvalue()


def _encode_fifo(w: Writer, fifo: FifoState) -> None:
    """A FIFO queue's tail: each live message's group and deduplication id (by seq), then
    the remembered receive attempts (oldest first) with their (seq, lease id) pairs."""
    w.u32(len(fifo.meta))
    for seq in sorted(fifo.meta):
        group, dedup_id = fifo.meta[seq]
        w.raw(_CLAIM_TAIL.pack(seq))
        w.text(group)
        w.text(dedup_id)
    w.u32(len(fifo.attempts))
    for attempt_id, (at, leases) in fifo.attempts.items():
        w.text(attempt_id)
        w.raw(_CLAIM_TAIL.pack(at))
        w.int_array(array("q", [x for pair in leases for x in pair]))


def _decode_fifo(r: Reader) -> FifoState:
    fifo = FifoState()
    for _ in range(r.u32()):
        (seq,) = _CLAIM_TAIL.unpack(r.raw(_CLAIM_TAIL.size))
        fifo.meta[seq] = (r.text(), r.text())
    for _ in range(r.u32()):
        attempt_id = r.text()
        (at,) = _CLAIM_TAIL.unpack(r.raw(_CLAIM_TAIL.size))
        flat = r.int_array("q")
        if len(flat) % 2:
            raise InvalidParameter("a receive attempt's leases are not pairs")
        fifo.attempts[attempt_id] = (at, tuple(zip(flat[0::2], flat[1::2], strict=True)))
    return fifo


def _bits64(data: bytes) -> BitMap64:
    try:
        return BitMap64.deserialize(data)
    except (ValueError, OverflowError, IndexError) as e:
        raise InvalidParameter(f"bad priority level bitmap: {e}") from None


def _bits(data: bytes) -> BitMap:
    try:
        return BitMap.deserialize(data)
    except (ValueError, OverflowError, IndexError) as e:  # IndexError: a truncated bitmap
        raise InvalidParameter(f"bad bitmap: {e}") from None


def decode_queues(r: Reader) -> tuple[int, dict[str, QueueState]]:
    if r.raw(4) != IMAGE_MAGIC:
        raise InvalidParameter("not a queue machine image")
    version, incarnations, nqueues = _IMAGE_HEAD.unpack(r.raw(_IMAGE_HEAD.size))
    if version > max(READABLE_IMAGE_VERSIONS):
        raise NewerLayout(
            f"image version {version} is from a newer release than this one, which reads "
            f"versions {', '.join(map(str, READABLE_IMAGE_VERSIONS))}"
        )
    if version not in READABLE_IMAGE_VERSIONS:
        raise InvalidParameter(
            f"image version {version}; this release reads versions {READABLE_IMAGE_VERSIONS}"
        )
    queue_head = _QUEUE_HEAD if version >= 3 else _QUEUE_HEAD_V2
    queues: dict[str, QueueState] = {}
    for _ in range(nqueues):
        name = r.text()
        attributes = read_attributes(r)
        head = queue_head.unpack(r.raw(queue_head.size))
        if version < 3:
            head = (*head[:12], 0, 0, head[12])
        q = QueueState(
            name, head[0], attributes, head[1], segment_bytes=head[10], segment_age_ms=head[11]
        )
        for field, value in zip(_COUNTERS, head[2:10], strict=True):
            setattr(q, field, value)
        q.skew, q.skew_stamp = head[12], head[13]
        if q.skew < 0:
            raise InvalidParameter(f"queue {name!r}: negative clock skew {q.skew}")
        for _ in range(head[14]):
            first, count, size, sealed, created, nbits, released, crc = _SEGMENT_HEAD.unpack(
                r.raw(_SEGMENT_HEAD.size)
            )
            seg = Segment(first, created)
            seg.count, seg.size, seg.sealed = count, size, bool(sealed)
            seg.released, seg.crc = bool(released), crc
            seg.deleted = _bits(r.raw(nbits))
            seg.expired, seg.dead, seg.purged, seg.moved, seg.copies = (
                _bits(r.blob()) for _ in range(5)
            )
            pairs = r.int_array("q")
            if len(pairs) % 2:
                raise InvalidParameter(f"odd receive-count pairs array ({len(pairs)} items)")
            seg.counts = dict(zip(pairs[0::2], pairs[1::2], strict=True))
            batch = r.opt_text()
            if batch is not None:
                seg.claim = (batch, _CLAIM_TAIL.unpack(r.raw(_CLAIM_TAIL.size))[0])
            if version >= 6:
                flags = r.u8()
                if flags & ~_SEG_ARCHIVED:
                    raise InvalidParameter(f"unknown segment flags {flags:#x}")
                seg.archived = bool(flags & _SEG_ARCHIVED)
                seg.replays = _bits(r.blob())
            q.segments.append(seg)
            q.firsts.append(first)
        t = q.touched
        t.cells = r.int_array("q")
        if len(t.cells) % WIDTH:
            raise InvalidParameter(f"queue {name!r}: touched cells not a multiple of {WIDTH}")
        t.reindex()
        if len(t.slot_of) * WIDTH != len(t.cells):
            raise InvalidParameter(f"queue {name!r}: a seq is touched twice")
        for _ in range(r.u32()):
            seq, sent = _DEDUP_TAIL.unpack(r.raw(_DEDUP_TAIL.size))
            q.moved[seq] = (sent, tuple(r.int_array("q")))
        for _ in range(r.u32()):
            dedup_id, mid = r.text(), r.text()
            seq, at = _DEDUP_TAIL.unpack(r.raw(_DEDUP_TAIL.size))
            q.dedup[dedup_id] = (mid, seq, at)
        if attributes.fifo:
            q.fifo = _decode_fifo(r)
        if version >= 4:
            pairs = r.int_array("q")
            if len(pairs) % 2:
                raise InvalidParameter(f"queue {name!r}: odd time-to-live pairs array")
            q.ttl = dict(zip(pairs[0::2], pairs[1::2], strict=True))
            q.rebuild_ttl()
        if version >= 5:
            q.ready.restore_levels([_bits64(r.blob()) for _ in range(r.u8())])
        if version >= 7:
            members = {}
            for _ in range(r.u32()):
                tenant = r.text()
                members[tenant] = _bits64(r.blob())
            q.ready.restore_tenants(members, r.opt_text())
        queues[name] = q
    r.end()
    return incarnations, queues
