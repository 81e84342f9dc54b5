"""A fixed sample of every persistent and wire format, encoded by the current code.

Every input is fixed (ids, times, bodies, keys), so each sample's bytes depend only on the
encoder. `SAMPLES` maps a sample's name to ``(format version, build)``: the version is the one
the bytes are written in (``"1 (implicit)"`` where no byte carries it), ``build()`` returns the
bytes. `tests.formats.test_golden` compares them with ``golden/formats.json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgspec

from cmq import stream
from cmq.archive import manifest as archive_manifest
from cmq.backup import format as backup_format
from cmq.catalog.meta import CatalogMachine
from cmq.errors import CmqError, Overloaded
from cmq.export_values import ImportedMessage
from cmq.failure import Failure
from cmq.frontend import base, calls, key_calls, wire
from cmq.fsm import commands as qc
from cmq.fsm.image import SHIPPED_MAGIC, ship
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import MemorySegmentStore
from cmq.fsm.store import StoredMessage
from cmq.fsm.store import encode_record as encode_segment_record
from cmq.grants import KeyGrant, KeyRecord
from cmq.model import (
    EntryResult,
    OutgoingMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    RetryPolicy,
    SegmentCounts,
    SendRefused,
    SentMessage,
)
from cmq.routing import rpc
from cmq.routing.receipts import ReceiptSigner
from cmq.segment_values import SegmentRecord
from raftlog.core.types import (
    ConfState,
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    Snapshot,
    SnapshotMeta,
)
from raftlog.runtime.statemachine import encode_batch
from raftlog.storage import record as wal
from raftlog.storage.files import encode_snapshot_file
from raftlog.transport import codec
from raftlog.transport.resume import ChunkState, FrameKey, encode_state

T0 = 1_700_000_000_000
"""The fixed "now" of every sample (ms)."""
GROUP = 7
CONF = ConfState((1, 2, 3), (4,))
RECEIPT_KEY = b"golden-receipt-key-0123456789"

Sample = tuple[str, Callable[[], bytes]]


# -- raftlog --------------------------------------------------------------------------------------


def _wal_samples() -> dict[str, Sample]:
    entries = (
        Entry(3, 10, EntryKind.NORMAL, b"cmd-a"),
        Entry(3, 11, EntryKind.CONF, b"conf-b"),
        Entry(4, 12, EntryKind.NORMAL, b""),
    )
    records: dict[str, wal.Record] = {
        "entries": wal.EntriesRecord(entries),
        "hard_state": wal.HardStateRecord(HardState(4, 2, 11)),
        "snapshot_created": wal.SnapshotRecord(SnapshotMeta(9, 3, CONF), False),
        "snapshot_installed": wal.SnapshotRecord(SnapshotMeta(9, 3, CONF), True),
        "conf": wal.ConfRecord(CONF),
        "drop": wal.DropRecord(),
    }
    return {
        f"wal_record.{name}": ("1 (implicit)", lambda r=r: wal.encode_record(GROUP, r))
        for name, r in records.items()
    }


def _message() -> Message:
    return Message(
        MsgType.APP,
        to=2,
        frm=1,
        term=4,
        log_term=3,
        index=9,
        entries=(Entry(4, 10, EntryKind.NORMAL, b"x"), Entry(4, 11, EntryKind.CONF, b"yz")),
        commit=9,
        epoch=5,
    )


def _snap_message() -> Message:
    snap = Snapshot(SnapshotMeta(9, 3, CONF), b"image")
    return Message(MsgType.SNAP, to=2, frm=1, term=4, snapshot=snap, epoch=6)


def _peer_samples() -> dict[str, Sample]:
    k = codec.FrameKind
    nonce = bytes(range(32))
    chunk = codec.Chunk(77, k.RAFT, 1, 3, 300, 0xDEADBEEF, b"piece")
    state = ChunkState(True, FrameKey(3, 300, 0xDEADBEEF), 2, (FrameKey(2, 100, 0x1234),))
    frames: dict[str, tuple[codec.FrameKind, Callable[[], bytes]]] = {
        "hello": (k.HELLO, lambda: codec.encode_hello(5, nonce)),
        "challenge": (k.CHALLENGE, lambda: nonce + bytes(range(32, 64))),
        "auth": (k.AUTH, lambda: bytes(range(64, 96))),
        "raft": (
            k.RAFT,
            lambda: codec.encode_messages([(GROUP, _message()), (8, _snap_message())]),
        ),
        "beats": (k.BEATS, lambda: codec.encode_beats([codec.Beat(GROUP, 4, 11)])),
        "beat_acks": (k.BEAT_ACKS, lambda: codec.encode_beat_acks([codec.BeatAck(GROUP, 4)])),
        "call": (k.CALL, lambda: codec.encode_call(42, False, b"payload")),
        "reply": (k.REPLY, lambda: codec.encode_call(42, True, b"error")),
        "call_clock_ping": (k.CALL, lambda: codec.encode_clock_ping(3)),
        "reply_clock_pong": (k.REPLY, lambda: codec.encode_clock_pong(3, T0)),
        "chunk": (k.CHUNK, lambda: codec.encode_chunk(chunk)),
        "quiesce": (k.QUIESCE, lambda: codec.encode_beats([codec.Beat(GROUP, 4, 11)])),
        "chunk_state": (k.CHUNK_STATE, lambda: encode_state(state)),
    }
    return {
        f"peer_frame.{name}": (
            "1 (implicit)",
            lambda kind=kind, body=body: codec.frame(kind, body()),
        )
        for name, (kind, body) in frames.items()
    }


def _raftlog_samples() -> dict[str, Sample]:
    return {
        **_wal_samples(),
        "proposal_batch": ("1", lambda: encode_batch([b"first", b"", b"third"])),
        "snapshot_file": (
            "1 (implicit, magic CMQS)",
            lambda: encode_snapshot_file(GROUP, 9, 3, b"img"),
        ),
        **_peer_samples(),
    }


# -- cmq ------------------------------------------------------------------------------------------

# max_message_size pinned: the samples keep their bytes whatever the default is.
ATTRS = QueueAttributes(
    visibility_timeout=30, delay_seconds=1, dead_letter_queue="dlq", max_message_size=262_144
)
FIFO_ATTRS = QueueAttributes(
    fifo=True, content_based_deduplication=True, archive=True, max_message_size=262_144
)
LONG_DELAY_ATTRS = QueueAttributes(delay_seconds=60, max_delay_seconds=604_800)
"""Attributes with a long max delay (flag ``long_delays``: attribute flag 0x10 and its u32)."""
RETRY_ATTRS = QueueAttributes(retry=RetryPolicy(2, 1.5, 600), max_message_size=262_144)
"""Attributes with a retry policy (flag ``retry_backoff``: attribute flag 0x08 and its fields)."""
PRIORITY_ATTRS = QueueAttributes(priorities=8, max_message_size=262_144)
"""Attributes with priorities (flag ``message_priorities``: attribute flag 0x20 and its u8)."""
RETAIN_ATTRS = QueueAttributes(
    visibility_timeout=30,
    delay_seconds=1,
    dead_letter_queue="dlq",
    max_message_size=262_144,
    retain_acked_seconds=86_400,
)
"""`ATTRS` keeping acknowledged messages (flag ``rewind``: attribute flag 0x40 and its u32)."""


def _new(
    i: int, ttl_ms: int | None = None, priority: int = 0, group: str | None = None
) -> qc.NewMessage:
    body = f"body {i}".encode()
    attrs = (("k", str(i)),)
    return qc.NewMessage(f"msg-{i:04d}", body, False, attrs, None, None, group, ttl_ms, priority)


ACK_RUNS = qc.Ack("q", T0, ((1, 100), (2, 101), (3, 102), (9, 200)))
"""An ack whose entries are two runs, encoded as `ACK_RUNS` (flag ``batch_receipts``)."""


def queue_commands() -> dict[str, qc.Command]:
    """One command of each type this release writes (``PRODUCE`` is only read: logs of before
    ``PRODUCE_RECORDS``), plus the optional trailing fields."""
    fifo_msg = qc.NewMessage("msg-fifo", b"\x00\x01", True, (), 5, "dedup-1", "group-a")
    return {
        "create_queue": qc.CreateQueue("q", ATTRS, T0, 1 << 20, 60_000),
        "create_queue_fifo": qc.CreateQueue("f.fifo", FIFO_ATTRS, T0),
        "delete_queue": qc.DeleteQueue("q"),
        "set_attributes": qc.SetAttributes("q", ATTRS),
        "set_attributes_retry": qc.SetAttributes("q", RETRY_ATTRS),
        "set_attributes_long_delays": qc.SetAttributes("q", LONG_DELAY_ATTRS),
        "set_attributes_priorities": qc.SetAttributes("q", PRIORITY_ATTRS),
        "purge": qc.Purge("q", T0),
        "produce_records": qc.Produce("q", T0, (_new(1), _new(2))),
        "produce_records_options": qc.Produce("f.fifo", T0, (fifo_msg,)),
        "produce_records_import": qc.Produce("q", T0, (_new(3),), expect_sent=12),
        "produce_records_ttl": qc.Produce("q", T0, (_new(5, ttl_ms=3_600_000),)),
        "produce_records_priority": qc.Produce("q", T0, (_new(6, priority=7), _new(7))),
        "produce_records_tenant": qc.Produce("q", T0, (_new(8, group="tenant-a"), _new(9))),
        "lease": qc.Lease("q", T0, 10, 30_000),
        "lease_attempt": qc.Lease("f.fifo", T0, 1, None, "attempt-1"),
        "ack": qc.Ack("q", T0, ((1, 100), (2, 101))),
        "change_visibility": qc.ChangeVisibility("q", T0, ((1, 100, 5_000),)),
        "nack": qc.Nack("q", T0, ((1, 100),), 2_000),
        "dead_letter": qc.DeadLetter("q", (1, 2, 3)),
        "expire": qc.Expire("q", T0),
        "claim_segments": qc.ClaimSegments("q", T0, "batch-1", (1, 65), 600_000),
        "mark_archived": qc.MarkArchived("q", T0, "batch-1", (1,)),
        "tidy": qc.Tidy("q", T0),
        "retime": qc.Retime("q", T0),
        "set_attributes_retain": qc.SetAttributes("q", RETAIN_ATTRS),
        "rewind": qc.Rewind("q", T0, T0 - 3_600_000, 5, 1024),
    }


def _segment_record() -> bytes:
    m = StoredMessage("msg-0001", 5, b"hello", False, (("k", "v"),), T0)
    binary = StoredMessage("msg-0002", 6, b"\xff\x00", True, (), T0 + 1)
    return encode_segment_record(m, T0 + 1_000) + encode_segment_record(binary, T0 + 1)


def _segment_record_leveled() -> bytes:
    """Two records with a priority level (flags bit 1, the level byte after the flags)."""
    m = StoredMessage("msg-0003", 7, b"urgent", False, (("k", "v"),), T0, priority=3)
    binary = StoredMessage("msg-0004", 8, b"\xff", True, (), T0 + 2, priority=31)
    return encode_segment_record(m, T0 + 2) + encode_segment_record(binary, T0 + 2)


def segment_index() -> bytes:
    """The index file of a sealed segment holding `_segment_record`'s two records, as the store
    writes it (the ``segment_index`` flag enabled)."""
    store = MemorySegmentStore(indexes=True)
    m = StoredMessage("msg-0001", 5, b"hello", False, (("k", "v"),), T0)
    binary = StoredMessage("msg-0002", 6, b"\xff\x00", True, (), T0 + 1)
    frames = [encode_segment_record(m, T0 + 1_000), encode_segment_record(binary, T0 + 1)]
    store.append("q", 5, [m, binary], frames)
    store.seal("q", 5)
    store.flush()
    return store.indexes[("q", 5)]


def queue_machine(
    skew: bool,
    ttl: bool = False,
    priority: bool = False,
    rewind: bool = False,
    tenants: bool = False,
) -> tuple[QueueMachine, MemorySegmentStore]:
    """A data group's machine after a fixed run of commands (``skew``: and a `Retime` of a
    queue whose time got ahead, so its image is written as version 3; ``ttl``: and a message
    with a time to live, so version 4; ``priority``: and messages with priorities, so version
    5; ``rewind``: and a rewound acknowledged message, so version 6; ``tenants``: and a
    standard queue's messages with group ids, leased, so version 7)."""
    store = MemorySegmentStore()
    m = QueueMachine(store)
    cmds: list[qc.Command] = [
        qc.CreateQueue("q", ATTRS, T0),
        qc.CreateQueue("f.fifo", FIFO_ATTRS, T0),
        qc.Produce("q", T0, (_new(1), _new(2), _new(3))),
        qc.Produce("f.fifo", T0, (qc.NewMessage("m-f", b"x", False, (), None, "d-1", "g-1"),)),
        qc.Lease("q", T0 + 10, 1, 30_000),
    ]
    if skew:
        cmds += [qc.Lease("q", T0 + 7_200_000, 1, 2_000), qc.Retime("q", T0 + 1_000)]
    if ttl:
        cmds += [qc.Produce("q", T0 + 20, (_new(4, ttl_ms=60_000),))]
    if priority:
        with_levels = dataclasses.replace(ATTRS, priorities=4)
        cmds += [
            qc.SetAttributes("q", with_levels),
            qc.Produce("q", T0 + 30, (_new(5, priority=3), _new(6, priority=1), _new(7))),
        ]
    if rewind:
        cmds += [
            qc.SetAttributes("q", RETAIN_ATTRS),
            qc.Ack("q", T0 + 30, ((1, 1),)),
            qc.Rewind("q", T0 + 40, T0),
        ]
    if tenants:
        cmds += [
            qc.Produce("q", T0 + 40, (_new(8, group="t-b"), _new(9, group="t-a"), _new(10))),
            qc.Lease("q", T0 + 50, 2, 30_000),
        ]
    for index, cmd in enumerate(cmds, start=1):
        m.apply(index, qc.encode_command(cmd))
    store.write_out()
    return m, store


def _image(
    skew: bool,
    ttl: bool = False,
    priority: bool = False,
    rewind: bool = False,
    tenants: bool = False,
) -> bytes:
    return queue_machine(skew, ttl, priority, rewind, tenants)[0].encode_image(reuse=False)


def _shipped() -> bytes:
    m, store = queue_machine(False)
    image = m.encode_image(reuse=False)
    from cmq.fsm.image import decode_image

    _, queues = decode_image(image)
    shipped = ship(image, queues.values(), store)
    assert shipped.startswith(SHIPPED_MAGIC)
    return shipped


def catalog_commands() -> dict[str, bytes]:
    return {
        "register_node": CatalogMachine.register_node(1, "10.0.0.1:7000", ["/d1"], "z1", ":8000"),
        "init": CatalogMachine.init(4, 3, [1, 2, 3]),
        "assign": CatalogMachine.assign("q"),
        "remove": CatalogMachine.remove("q"),
        "drain": CatalogMachine.drain(2),
        "moved": CatalogMachine.moved(1, 4, 2),
    }


def _catalog_image(formed: bool) -> bytes:
    """A catalog of three nodes; ``formed``: initialized by this release (every flag it knows
    enabled) and holding a queue, else no flag enabled (as a cluster upgraded from 0.1.0)."""
    cat = CatalogMachine()
    index = 0
    for node in (1, 2, 3):
        index += 1
        cat.apply(index, CatalogMachine.register_node(node, f"10.0.0.{node}:7000", [f"/d{node}"]))
    for cmd in (CatalogMachine.init(4, 3, [1, 2, 3]), CatalogMachine.assign("q")) * formed:
        index += 1
        cat.apply(index, cmd)
    return cat.snapshot()


def stream_requests() -> list[stream.Request]:
    msg = stream.PlainMessage(b"body", False, 2, {"k": "v"}, "dedup", "group")
    plain = stream.PlainMessage(b"\x00", True)
    at = stream.Message(b"later", deliver_at="2026-11-26T10:00:00Z")
    return [
        # As clients frame them: six fields without deliver_at, seven with it.
        stream.Send(1, "q", cast("list[stream.Message]", [msg, plain])),
        stream.Send(7, "q", [at]),
        stream.Send(8, "q", [stream.Message(b"urgent", priority=3)]),
        stream.Subscribe(2, "q", 10, 30, 8),
        stream.Credit(2, 5),
        stream.Unsubscribe(2),
        stream.Ack(3, "q", ["r1", "r2"]),
        stream.Nack(4, "q", ["r3"], 7),
    ]


def stream_answers() -> list[stream.Answer]:
    delivered = stream.Delivered("msg-0001", 5, b"hi", False, "rcpt", 1, T0, {"k": "v"}, None, None)
    urgent = stream.Delivered("msg-0002", 6, b"!", False, "rcpt2", 1, T0, {}, None, None, 3)
    return [
        stream.sent(1, [("msg-0001", 5)], ""),  # as a server sends it: no leader hint
        stream.deliver(2, [delivered, urgent], ""),
        stream.results(3, [("r1", True, None), ("r2", False, "ReceiptHandleIsInvalid")], ""),
        stream.Failed(4, 400, "InvalidParameter", "bad", None),
        stream.Failed(5, 503, "Overloaded", "busy", 0.5),
    ]


def front_end_calls() -> list[base.Call[Any]]:
    """One call of each kind the front-end socket carries (`cmq.frontend.calls`), tag order."""
    attrs = QueueAttributes(visibility_timeout=10, max_message_size=262_144)
    message = OutgoingMessage(b"body", False, None, (("k", "v"),), "dedup", "group")
    imported = ImportedMessage(
        "msg-0001", b"body", True, (("k", "v"),), 0, "g", "d", T0 + 5_000, T0 + 60_000
    )
    every: list[base.Call[Any]] = [
        calls.CreateQueue("q", attrs),
        calls.ListQueues(),
        calls.GetQueue("q"),
        calls.Peek("q", 10),
        calls.SetAttributes("q", {"visibility_timeout": 20, "dead_letter_queue": None}),
        calls.DeleteQueue("q"),
        calls.QueueMetadata("q"),
        calls.UpdateMetadata("q", {"a": "1"}, ["b"]),
        calls.Purge("q"),
        calls.Send(
            "q",
            [message, OutgoingMessage(b"\x00", True, 3), OutgoingMessage(b"t", ttl_deadline_ms=T0)],
        ),
        calls.SendEach("q", [message]),
        calls.Receive("q", 10, 30, 20, "attempt"),
        calls.Ack("q", ["r1", "r2"]),
        calls.ChangeVisibility("q", [("r1", 5)]),
        calls.Nack("q", ["r3"], 7),
        calls.ListSegments("q", "released"),
        calls.ReadSegment("q", 1),
        calls.ClaimSegments("q", "batch-1", [1, 9], 60_000),
        calls.MarkArchived("q", "batch-1", [1]),
        calls.GroupDigest(3),
        calls.ExportCatalog(),
        calls.ImportCatalog([{"access_key_id": "AK"}], {"q": {"a": "1"}}),
        calls.ExportMessages("q", 0, 10, 100),
        calls.ImportMessages("q", [imported], 4),
        calls.ListNodes(),
        calls.JoinNode(4, "10.0.0.4:9080", "10.0.0.4:8080", ("/d1", "/d2"), "z"),
        calls.DrainNode(4),
        calls.ActivateNode(4),
        calls.RemoveNode(4),
        calls.SetGroups(8),
        calls.ListFeatures(),
        calls.EnableFeatures(["queue_retime"]),
        calls.State(),
        calls.Metrics(),
        calls.Rewind("q", T0),
        calls.ReadSegmentData("q", 1),
        key_calls.CopyKeys(7),
        key_calls.CreateKey((KeyGrant("orders-*", ("receive", "send")),)),
        key_calls.GrantKey("AKCMQ0123456789ABCDEF", KeyGrant("*", ("admin",))),
        key_calls.RevokeKey("AKCMQ0123456789ABCDEF", "orders-*"),
        key_calls.DeleteKey("AKCMQ0123456789ABCDEF"),
    ]
    return every


def front_end_requests() -> bytes:
    """Every call as request frames (ids 1..), then the cancel of request 1."""
    frames = [wire.encode_request(i, c) for i, c in enumerate(front_end_calls(), 1)]
    return b"".join([*frames, wire.encode_request(1, None)])


def front_end_answers() -> list[tuple[int, base.Call[Any], Any]]:
    """Answers of several kinds: (request id, the call, its result or the error raised)."""
    record = SegmentRecord(5, "msg-0001", T0, 2, (("k", "v"),), b"hi", "acked")
    received = ReceivedMessage(
        "msg-0001", 5, b"hi", False, "rcpt", 1, T0, (("k", "v"),), "g", "d", T0 + 60_000
    )
    stats = QueueStats(1, 2, 3, 4, 5, 6, 7, 8, SegmentCounts(1, 2, 3, 4), 9, 10)
    damage = Failure("corrupt_segment", "record 3 fails its checksum", None)
    refused = SendRefused("MessageTooLarge", "a message body has 9 bytes; the queue allows 8")
    stale = EntryResult("r2", False, "LeaseStale")
    grants = (KeyGrant("orders-*", ("receive", "send")),)
    entry = key_calls.KeyEntry("AKCMQ0123456789ABCDEF", "s3cr3t", grants, T0)
    cluster = key_calls.KeyEntry("AKCMQCLUSTERABCDEFGH", "derived", (), 0)
    bare = KeyRecord("AKCMQ0123456789ABCDEF", "", grants, T0)
    return [
        (1, calls.GetQueue("q"), (QueueAttributes(max_message_size=262_144), stats)),
        (2, calls.SendEach("q", []), [SentMessage("msg-0001", 5), refused]),
        (3, calls.Receive("q", 1, None, None), [received]),
        (4, calls.Ack("q", ["r1", "r2"]), [EntryResult("r1", True), stale]),
        (5, calls.ReadSegment("q", 5), calls.SegmentRead("0a1b2c3d", [[record]], damage)),
        (6, calls.State(), calls.NodeState(True, {"node": 1, "groups": {"0": {"role": "leader"}}})),
        (7, calls.Purge("q"), Overloaded("busy")),
        (8, calls.ReadSegmentData("q", 5), calls.SegmentDataRead("0a1b2c3d", b"CMQD", damage)),
        (9, key_calls.CopyKeys(7), key_calls.KeyCopy(8, cluster, [entry])),
        (10, key_calls.CopyKeys(8), None),
        (11, key_calls.CreateKey(grants), key_calls.CreatedKey(bare, "s3cr3t")),
        (12, key_calls.RevokeKey("AKCMQ0123456789ABCDEF", "x"), bare),
        (13, key_calls.DeleteKey("AKCMQ0123456789ABCDEF"), None),
    ]


FORWARDED_FAILURES = (
    Failure("Retry", "not the leader", None, 3),
    Failure("Overloaded", "the queue's leader is busy", 1.5),
    Failure("QueueNotFound", "queue 'q' does not exist"),
)
"""Failures a node answers a forwarded call with (`cmq.routing.rpc.encode_failure`)."""


def forwarded_failures(packed: bool) -> bytes:
    """`FORWARDED_FAILURES`, one payload a line (the JSON form has no newline in it; the
    packed one is hex here, so the sample stays one readable string)."""
    out = [rpc.encode_failure(f, packed=packed) for f in FORWARDED_FAILURES]
    return b"\n".join(p.hex().encode() if packed else p for p in out)


def front_end_answer_frames() -> bytes:
    out = []
    for rid, call, result in front_end_answers():
        if isinstance(result, CmqError):
            out.append(wire.encode_failure(rid, result))
        else:
            out.append(wire.encode_answer(rid, call, result))
    return b"".join(out)


def _archive_manifest() -> bytes:
    f = archive_manifest.ManifestFile(
        "q/date=2023-11-14/part-0.parquet", "q", "2023-11-14", 3, 900, 1, 3
    )
    s = archive_manifest.ManifestSegment("q", 1, 3, 3, "crc32:0badf00d", 3, 1, 3, [f.path])
    m = archive_manifest.Manifest(
        archive_manifest.ARCHIVE_VERSION, "batch-1", T0, "file:///archive", 3, 900, [s], [f]
    )
    return archive_manifest.encode(m)


def _compaction_manifest() -> bytes:
    old = [
        archive_manifest.ManifestFile(
            f"queue=q/date=2023-11-14/batch_id=b-{i}/part-0.parquet",
            "q",
            "2023-11-14",
            3,
            900,
            i,
            i,
        )
        for i in (1, 2)
    ]
    new = archive_manifest.ManifestFile(
        "queue=q/date=2023-11-14/batch_id=c-1/part-00000-c-1.parquet",
        "q",
        "2023-11-14",
        6,
        1200,
        1,
        2,
    )
    m = archive_manifest.Manifest(
        archive_manifest.VERSION,
        "c-1",
        T0,
        "file:///archive",
        6,
        1200,
        [],
        [new],
        kind=archive_manifest.COMPACTION,
        retires=old,
    )
    return archive_manifest.encode(m)


def _backup_manifest() -> bytes:
    entry = backup_format.QueueEntry(
        "q", {"visibility_timeout": 30}, "queues/0.jsonl", 2, "ab" * 32, 9, T0, T0 + 5
    )
    m = backup_format.Manifest(
        backup_format.FORMAT_VERSION,
        "0.2.0",
        "cmq backup",
        T0,
        {"keys": "catalog/keys.json"},
        [entry],
    )
    return backup_format.encode_manifest(m)


def _backup_message() -> bytes:
    return backup_format.encode_message(
        backup_format.BackupMessage(
            "msg-0001",
            b"body",
            T0,
            "delayed",
            attributes={"k": "v"},
            delay_ms=5_000,
            visible_at=T0 + 5_000,
            ttl_deadline=T0 + 60_000,
            priority=2,
        )
    )


def _cmq_samples() -> dict[str, Sample]:
    out: dict[str, Sample] = {
        f"queue_command.{name}": ("1 (implicit, type byte)", lambda c=c: qc.encode_command(c))
        for name, c in queue_commands().items()
    }
    out |= {
        f"catalog_command.{name}": ("1 (implicit, op)", lambda c=c: c)
        for name, c in catalog_commands().items()
    }
    signer = ReceiptSigner(RECEIPT_KEY)
    out |= {
        "segment_records": ("1 (implicit, flags byte)", _segment_record),
        "segment_records.leveled": (
            "1 (implicit, flags bit 1: a priority level)",
            _segment_record_leveled,
        ),
        "segment_index": ("1 (magic CMQX, behind segment_index)", segment_index),
        "data_group_image.v2": ("2", lambda: _image(False)),
        "data_group_image.v3": ("3 (behind queue_retime)", lambda: _image(True)),
        "data_group_image.v4": ("4 (behind message_ttl)", lambda: _image(True, True)),
        "data_group_image.v5": (
            "5 (behind message_priorities)",
            lambda: _image(True, True, priority=True),
        ),
        "data_group_image.v6": (
            "6 (behind rewind)",
            lambda: _image(True, True, priority=True, rewind=True),
        ),
        "data_group_image.v7": (
            "7 (behind fair_queues)",
            lambda: _image(True, True, priority=True, rewind=True, tenants=True),
        ),
        "data_group_image.shipped": ("1 (magic CMQSHIP1)", _shipped),
        "catalog_image": ("1", lambda: _catalog_image(True)),
        "catalog_image.no_flags": ("1", lambda: _catalog_image(False)),
        "receipt": ("1 (implicit, length)", lambda: signer.mint("q", 5, 9).encode()),
        "queue_command_ack_runs": (
            "type 18 (behind batch_receipts)",
            lambda: qc.encode_ack(ACK_RUNS, runs_ok=True),
        ),
        "receipt.run": (
            "2 (implicit, length; behind batch_receipts)",
            lambda: "\n".join(signer.mint_leased("q", [(5, 9), (7, 10)], runs_ok=True)).encode(),
        ),
        "stream.requests": ("1 (implicit, tags)", lambda: stream.encode(stream_requests())),
        "stream.answers": ("1 (implicit, tags)", lambda: stream.encode(stream_answers())),
        "front_end.requests": (str(wire.WIRE_VERSION), front_end_requests),
        "front_end.answers": (str(wire.WIRE_VERSION), front_end_answer_frames),
        "forwarded_failure.json": ("1 (a JSON object)", lambda: forwarded_failures(False)),
        "forwarded_failure.packed": (
            "2 (a MessagePack array, behind peer_failures)",
            lambda: forwarded_failures(True),
        ),
        "archive_manifest": (str(archive_manifest.ARCHIVE_VERSION), _archive_manifest),
        "archive_manifest.compaction": (str(archive_manifest.VERSION), _compaction_manifest),
        "backup_manifest": (str(backup_format.FORMAT_VERSION), _backup_manifest),
        "backup_message": (str(backup_format.FORMAT_VERSION), _backup_message),
    }
    return out


def samples() -> dict[str, Sample]:
    """Every sample, by name."""
    return {**_raftlog_samples(), **_cmq_samples()}


GOLDEN = Path(__file__).parent / "golden" / "formats.json"


class Golden(msgspec.Struct, frozen=True):
    """One recorded sample: the version its bytes are written in, and the bytes (hex)."""

    version: str
    hex: str
