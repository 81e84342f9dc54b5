"""Every reader refuses a newer version of its format by name: the error says the data or frame
is a newer release's, names the file, entry or peer when there is one, and what was found and
what this release reads; never a decode exception, never a silent misread. Corruption is still
reported as corruption, not as "newer"."""

from __future__ import annotations

import json
import os
import pickle
import struct
import typing
import zlib
from pathlib import Path

import msgspec
import orjson
import pytest

from cmq import stream
from cmq.archive import manifest as archive_manifest
from cmq.archive.errors import NewerManifest
from cmq.backup import format as backup_format
from cmq.backup.errors import InvalidBackup, NewerBackupFormat
from cmq.catalog.meta import CatalogMachine
from cmq.errors import (
    InvalidParameter,
    InvariantBroken,
    NewerFormat,
    NewerLayout,
    ReceiptInvalid,
    UnreadableFrame,
)
from cmq.frontend import calls, wire
from cmq.fsm import commands as qc
from cmq.fsm.image import SHIPPED_MAGIC, decode_image, install_shipped
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segindex import decode_index
from cmq.fsm.segments import FileSegmentStore, MemorySegmentStore
from cmq.fsm.store import (
    FLAG_BINARY,
    SegmentLayout,
    StoredMessage,
    decode_tail,
    frame_record,
    record_tail,
)
from cmq.routing.receipts import ReceiptSigner
from cmq.upgrade.release import RELEASE
from raftlog.errors import CorruptRecord, InvariantViolation
from raftlog.errors import NewerFormat as RaftNewerFormat
from raftlog.runtime.statemachine import decode_batch, encode_batch
from raftlog.storage import record as wal
from raftlog.storage.files import decode_snapshot_file, encode_snapshot_file, wal_name
from raftlog.storage.recovery import recover
from raftlog.transport import codec
from tests.formats.samples import (
    RECEIPT_KEY,
    T0,
    queue_machine,
    segment_index,
    stream_answers,
    stream_requests,
)

# -- 1. WAL records -------------------------------------------------------------------------------


def _newer_frame(rtype: int, group: int = 7, payload: bytes = b"future") -> bytes:
    """A frame with a valid checksum whose type this release does not know."""
    body = struct.pack(">BQ", rtype, group) + payload
    return struct.pack(">II", len(body), zlib.crc32(body)) + body


def _hard_state(term: int) -> bytes:
    return wal.encode_record(7, wal.HardStateRecord(wal.HardState(term, 1, 0)))


def _wal(tmp_path: Path, *frames: bytes) -> str:
    path = tmp_path / wal_name(1)
    path.write_bytes(b"".join(frames))
    return str(path)


def test_wal_record_of_an_unknown_type_is_refused_by_name_and_never_truncated(
    tmp_path: Path,
) -> None:
    first = _hard_state(1)
    path = _wal(tmp_path, first, _newer_frame(6))  # the newer record is the last: not torn
    size = os.path.getsize(path)
    with pytest.raises(RaftNewerFormat) as err:
        recover(str(tmp_path), wal.DEFAULT_MAX_BODY)
    msg = str(err.value)
    assert path in msg and f"offset {len(first)}" in msg
    assert "record type 6" in msg and "record types 1-5" in msg and "newer release" in msg
    assert not isinstance(err.value, CorruptRecord)
    assert os.path.getsize(path) == size  # nothing cut away


def test_wal_snapshot_flag_and_entry_kind_of_a_newer_release_are_refused(tmp_path: Path) -> None:
    snap = struct.pack(">QQB", 9, 3, 0x02) + struct.pack(">II", 0, 0)
    with pytest.raises(wal.NewerRecord, match=r"snapshot flags 0x2.*newer release"):
        wal.decode_body(_newer_frame(3, payload=snap), 8, 8 + 9 + len(snap))
    entries = struct.pack(">QI", 5, 1) + struct.pack(">QBI", 2, 9, 0)
    frame = _newer_frame(1, payload=entries)
    with pytest.raises(wal.NewerRecord, match=r"kind 9 of entry 5.*entry kinds 0, 1"):
        wal.decode_body(frame, 8, len(frame))
    path = _wal(tmp_path, frame)
    with pytest.raises(RaftNewerFormat, match=r"offset 0.*kind 9"):
        recover(str(tmp_path), wal.DEFAULT_MAX_BODY)
    assert os.path.getsize(path) == len(frame)


def test_wal_damage_is_still_corruption_or_a_torn_tail(tmp_path: Path) -> None:
    bad = bytearray(_newer_frame(6))
    bad[-1] ^= 0xFF  # an unknown type *and* a failed checksum: damage, not a newer record
    _wal(tmp_path, bytes(bad), _hard_state(2))
    with pytest.raises(CorruptRecord, match="bad frame"):
        recover(str(tmp_path), wal.DEFAULT_MAX_BODY)
    other = tmp_path / "other"
    other.mkdir()
    path = _wal(other, _hard_state(1), bytes(bad))  # the same damage last: a torn tail
    result = recover(str(other), wal.DEFAULT_MAX_BODY)
    assert result.torn_tail is not None and os.path.getsize(path) == len(_hard_state(1))
    with pytest.raises(ValueError, match="hard state payload") as err:
        wal.decode_body(_newer_frame(2, payload=b"x"), 8, 8 + 10)
    assert not isinstance(err.value, wal.NewerRecord)


# -- 2. proposal batches --------------------------------------------------------------------------


def test_a_batch_of_a_newer_version_names_the_entry_and_both_versions() -> None:
    newer = bytes([2]) + encode_batch([b"x"])[1:]
    with pytest.raises(RaftNewerFormat) as err:
        decode_batch(newer, "group 3 entry 17")
    msg = str(err.value)
    assert "group 3 entry 17" in msg and "batch version 2" in msg and "batch version 1" in msg
    with pytest.raises(InvariantViolation, match="group 3 entry 17: truncated") as bad:
        decode_batch(encode_batch([b"xy"])[:-1], "group 3 entry 17")
    assert not isinstance(bad.value, RaftNewerFormat)


# -- 3. snapshot files ----------------------------------------------------------------------------


def test_a_snapshot_file_of_a_newer_layout_is_refused_naming_it_and_both_versions() -> None:
    raw = encode_snapshot_file(7, 9, 3, b"img")
    newer = b"CMQ\x02" + raw[4:]
    with pytest.raises(RaftNewerFormat) as err:
        decode_snapshot_file("/d/snap/x.snap", newer, 7, 9, 3)
    msg = str(err.value)
    assert "/d/snap/x.snap" in msg and "layout 2" in msg and "version 1" in msg
    assert "newer release" in msg
    with pytest.raises(CorruptRecord, match="bad snapshot file magic"):
        decode_snapshot_file("/d/snap/x.snap", b"XXXX" + raw[4:], 7, 9, 3)
    with pytest.raises(CorruptRecord, match="checksum"):
        decode_snapshot_file("/d/snap/x.snap", raw[:-1] + b"J", 7, 9, 3)


# -- 4. segment records ---------------------------------------------------------------------------


def _newer_record(seq: int) -> bytes:
    tail = bytearray(record_tail("m-1", False, (), b"body"))
    tail[0] = FLAG_BINARY | 0x04  # a flag bit a later release might set
    return frame_record(seq, T0, T0, bytes(tail))


def test_a_segment_record_with_unknown_flags_is_refused_naming_the_file_and_offset(
    tmp_path: Path,
) -> None:
    with pytest.raises(NewerLayout, match=r"record flags 0x5.*newer release"):
        decode_tail(_newer_record(1), 32, len(_newer_record(1)))
    store = FileSegmentStore(tmp_path, cache_bytes=0)
    try:
        good = StoredMessage("m-0", 1, b"ok", False, (), T0)
        frames = [frame_record(1, T0, T0, record_tail("m-0", False, (), b"ok")), _newer_record(2)]
        bad = StoredMessage("m-1", 2, b"body", False, (), T0)
        store.append("q", 1, [good, bad], frames)
        store.write_out()
        assert store.read("q", 1, 1).body == b"ok"
        with pytest.raises(NewerFormat) as err:
            store.read("q", 1, 2)
        msg = str(err.value)
        assert str(tmp_path) in msg and f"offset {len(frames[0])}" in msg
        assert "0x5" in msg and "newer release" in msg
    finally:
        store.close()


def test_a_damaged_segment_record_is_still_reported_as_damage() -> None:
    store = MemorySegmentStore(cache_bytes=0)
    tail = bytearray(record_tail("m-1", False, (), b"body"))
    tail[1] = 0xFF  # the id's length runs past the record
    store.append(
        "q",
        1,
        [StoredMessage("m-1", 1, b"", False, (), T0)],
        [frame_record(1, T0, T0, bytes(tail))],
    )
    with pytest.raises(InvariantBroken, match="at offset 0: bad record") as err:
        store.read("q", 1, 1)
    assert not isinstance(err.value, NewerFormat)


# -- 5. queue and catalog commands ----------------------------------------------------------------


def test_an_unknown_queue_command_type_names_the_type_and_a_newer_release() -> None:
    with pytest.raises(NewerLayout, match=r"unknown command type 99: .*newer release.*1-18"):
        qc.decode_command(bytes([99]) + b"\x00" * 8)
    m, _ = queue_machine(False)
    with pytest.raises(NewerFormat, match=r"entry 40: unknown command type 99"):
        m.apply(40, bytes([99]))
    with pytest.raises(InvariantBroken, match="entry 41: undecodable committed command") as bad:
        m.apply(41, qc.encode_command(qc.Purge("q", T0))[:-3])
    assert not isinstance(bad.value, NewerFormat)


def test_newer_message_options_and_attribute_flags_are_refused_as_newer() -> None:
    produce = bytearray(
        qc.encode_command(qc.Produce("q", T0, (qc.NewMessage("m", b"b", False, (), 5, None),)))
    )
    produce[-9] |= 0x40  # the options byte before the delay
    with pytest.raises(NewerLayout, match=r"unknown message options 0x41.*newer release"):
        qc.decode_command(bytes(produce))
    create = bytearray(qc.encode_command(qc.CreateQueue("q", qc.QueueAttributes(), T0)))
    flags_at = 1 + 4 + 1 + 8 * 5 + 1 + 8  # type, name, 5 ints, no DLQ, max receive count
    create[flags_at] |= 0x80
    with pytest.raises(NewerLayout, match=r"unknown queue attribute flags 0x80.*newer release"):
        qc.decode_command(bytes(create))


def test_an_unknown_catalog_command_names_the_op_the_entry_and_the_release() -> None:
    cat = CatalogMachine()
    for op in ("teleport", "key.rotate"):
        with pytest.raises(NewerFormat) as err:
            cat.apply(12, orjson.dumps({"op": op, "name": "x"}))
        msg = str(err.value)
        assert "catalog entry 12" in msg and repr(op) in msg and RELEASE in msg
        assert "newer release" in msg
    with pytest.raises(InvariantBroken, match="undecodable catalog command") as bad:
        cat.apply(13, b"{not json")
    assert not isinstance(bad.value, NewerFormat)


# -- 6. receipts ----------------------------------------------------------------------------------


def test_a_receipt_of_another_layout_is_invalid_saying_the_layout_is_unknown() -> None:
    import base64

    signer = ReceiptSigner(RECEIPT_KEY)
    longer = base64.urlsafe_b64encode(bytes(40)).decode().rstrip("=")
    with pytest.raises(ReceiptInvalid, match=r"layout is unknown \(40 bytes.*layout 1.*newer"):
        signer.verify("q", longer)
    with pytest.raises(ReceiptInvalid, match=r"layout is unknown \(80 characters"):
        signer.verify("q", "A" * 80)
    tampered = signer.mint("q", 5, 9)
    tampered = ("B" if tampered[0] != "B" else "C") + tampered[1:]
    with pytest.raises(ReceiptInvalid, match="altered"):
        signer.verify("q", tampered)


# -- 7. peer frames -------------------------------------------------------------------------------


def test_an_unknown_peer_frame_kind_is_a_newer_release_frame() -> None:
    with pytest.raises(codec.NewerFrame) as err:
        codec.parse_header(codec.FRAME_HEADER.pack(5, 12), 1 << 20)
    msg = str(err.value)
    assert "frame kind 12" in msg and "newer release" in msg and "1-11" in msg
    assert isinstance(err.value, codec.CodecError)  # the peer loop drops it, naming the node
    chunk = codec.encode_chunk(codec.Chunk(1, codec.FrameKind.RAFT, 0, 1, 3, 0, b"abc"))
    newer = chunk[:8] + bytes([40]) + chunk[9:]
    with pytest.raises(codec.NewerFrame, match="inner frame kind 40"):
        codec.decode_chunk(newer)
    with pytest.raises(codec.CodecError, match="outside") as bad:
        codec.parse_header(codec.FRAME_HEADER.pack(0, 4), 1 << 20)
    assert not isinstance(bad.value, codec.NewerFrame)


# -- 8. stream frames -----------------------------------------------------------------------------


def test_the_stream_tags_are_the_frames_tags() -> None:
    requests = {type(f).__struct_config__.tag for f in stream_requests()}
    answers = {type(f).__struct_config__.tag for f in stream_answers()}
    assert requests == stream.REQUEST_TAGS and answers == stream.ANSWER_TAGS


def test_a_request_frame_of_an_unknown_tag_is_failed_by_name_and_the_others_served() -> None:
    data = msgspec.msgpack.encode([[9, 77, "q"], [4, 3]])
    newer, unsubscribe = stream.decode_requests(data)
    assert isinstance(newer, stream.BadFrame) and newer.id == 77
    assert "frame tag 9" in newer.message and "newer release" in newer.message
    assert "1, 2, 3, 4, 5, 6" in newer.message
    assert unsubscribe == stream.Unsubscribe(3)
    bad = stream.decode_requests(msgspec.msgpack.encode([[4, "x"]]))[0]
    assert isinstance(bad, stream.BadFrame) and "newer" not in bad.message


def test_an_answer_of_an_unknown_tag_names_it() -> None:
    with pytest.raises(InvalidParameter, match=r"answer frame tag 30.*newer release.*16, 17"):
        stream.decode_answers(msgspec.msgpack.encode([[16, 1, []], [30, 2]]))
    with pytest.raises(InvalidParameter, match="undecodable stream message"):
        stream.decode_answers(b"\xc1")


# -- 9. the front-end socket ----------------------------------------------------------------------


def _body(frame: bytes) -> bytes:
    """A front-end frame without its length (what `wire.decode_request` reads)."""
    assert wire.HEAD.unpack(frame[: wire.HEAD.size])[0] == len(frame) - wire.HEAD.size
    return frame[wire.HEAD.size :]


def test_a_front_end_frame_of_another_version_is_refused_by_name() -> None:
    v = wire.WIRE_VERSION
    request = _body(wire.encode_request(7, calls.Purge("q")))
    assert request[0] == v == 7
    assert wire.decode_request(request) == (7, calls.Purge("q"))
    newer = bytes([v + 1]) + request[1:]
    with pytest.raises(
        UnreadableFrame, match=rf"wire version {v + 1} \(a newer release's\).*reads version {v}"
    ):
        wire.decode_request(newer)
    answer = _body(wire.encode_answer(7, calls.Purge("q"), 3))
    with pytest.raises(UnreadableFrame, match=rf"wire version {v + 1} \(a newer release's\)"):
        wire.decode_answer(bytes([v + 1]) + answer[1:])
    # The previous version (a failure without its leader) is refused by name too.
    with pytest.raises(UnreadableFrame, match=rf"wire version {v - 1};.*reads version {v}"):
        wire.decode_request(bytes([v - 1]) + request[1:])
    # Version 1 was pickled tuples: refused as such, never unpickled.
    with pytest.raises(UnreadableFrame, match=r"is a pickle \(wire version 1.*unpickles nothing"):
        wire.decode_request(pickle.dumps((1, "purge", ("q",), {})))


def test_a_front_end_call_of_a_newer_release_names_its_tag() -> None:
    assert {c.__struct_config__.tag for c in typing.get_args(calls.AnyCall)} == calls.CALL_TAGS
    head = bytes([wire.WIRE_VERSION])
    unknown = head + msgspec.msgpack.encode([1, [max(calls.CALL_TAGS) + 1, "q"]])
    with pytest.raises(UnreadableFrame, match=r"call tag 42 is unknown.*newer release.*1-41"):
        wire.decode_request(unknown)


def test_a_front_end_frame_that_does_not_decode_is_a_named_error() -> None:
    v = wire.WIRE_VERSION
    with pytest.raises(UnreadableFrame, match=rf"frame of 3 bytes does not decode.*version {v}"):
        wire.decode_request(bytes([v]) + b"\xc1x")
    wrong = bytes([v]) + msgspec.msgpack.encode([1, [9, 5]])  # Purge of a number
    with pytest.raises(UnreadableFrame, match=r"does not decode.*Expected `str`"):
        wire.decode_request(wrong)
    with pytest.raises(UnreadableFrame, match="answer to purge does not decode"):
        calls.Purge("q").decode_result(msgspec.msgpack.encode("three"))
    with pytest.raises(UnreadableFrame, match="an empty front-end socket frame"):
        wire.decode_answer(b"")


# -- 10. / 11. archive and backup manifests -------------------------------------------------------


def test_a_newer_archive_manifest_names_the_file_and_both_versions() -> None:
    data = json.dumps({"version": 3, "everything": "else changed"}).encode()
    with pytest.raises(NewerManifest) as err:
        archive_manifest.decode(data, "_manifests/b-1.json")
    msg = str(err.value)
    assert "_manifests/b-1.json" in msg and "version 3" in msg and "versions up to 2" in msg
    with pytest.raises(msgspec.ValidationError):
        archive_manifest.decode(json.dumps({"version": 1}).encode(), "_manifests/b-1.json")


def test_version_1_archive_manifests_are_still_read_and_have_no_compaction_fields() -> None:
    """Version 2 added ``kind`` and ``retires`` (compaction manifests); archive batches are
    still written as version 1, in version 1's bytes, and version 1 is read as before."""
    from tests.formats.samples import _archive_manifest

    data = _archive_manifest()
    assert b'"version": 1' in data and b"kind" not in data and b"retires" not in data
    m = archive_manifest.decode(data, "_manifests/batch-1.json")
    assert (m.version, m.kind, m.retires) == (1, "archive", [])
    one = json.loads(data)
    one["kind"] = "compaction"  # version 1 knows no kind
    with pytest.raises(msgspec.ValidationError):
        archive_manifest.decode(json.dumps(one).encode(), "_manifests/batch-1.json")
    two = dict(one, version=2, kind="merge")  # nor does version 2 know that one
    with pytest.raises(msgspec.ValidationError):
        archive_manifest.decode(json.dumps(two).encode(), "_manifests/batch-1.json")


def test_a_newer_backup_names_the_manifest_and_both_versions(tmp_path: Path) -> None:
    path = tmp_path / backup_format.MANIFEST
    path.write_text(json.dumps({"format_version": 4}))
    with pytest.raises(NewerBackupFormat) as err:
        backup_format.read_manifest(tmp_path)
    msg = str(err.value)
    assert "version 4" in msg and "format version 3" in msg and str(tmp_path) in msg
    path.write_text("{")
    with pytest.raises(InvalidBackup):
        backup_format.read_manifest(tmp_path)


# -- 12. data group and catalog images ------------------------------------------------------------


def test_a_newer_data_group_image_names_both_versions() -> None:
    image = bytearray(queue_machine(False)[0].encode_image(reuse=False))
    image[4] = 8
    newer = r"image version 8 is from a newer release.*2, 3, 4, 5, 6, 7"
    with pytest.raises(NewerFormat, match=newer):
        decode_image(bytes(image))
    image[4] = 1
    with pytest.raises(InvariantBroken, match="image version 1") as bad:
        decode_image(bytes(image))
    assert not isinstance(bad.value, NewerFormat)


def test_a_newer_shipped_snapshot_is_refused_before_anything_is_written() -> None:
    store = MemorySegmentStore()
    newer = SHIPPED_MAGIC[:-1] + b"2" + b"\x00" * 12
    with pytest.raises(NewerFormat, match=r"shipped snapshot: version b'2'.*reads version b'1'"):
        install_shipped(newer, store)
    m = QueueMachine(store)
    with pytest.raises(NewerFormat, match="shipped snapshot"):
        m.restore(5, newer)


def test_a_newer_segment_index_is_refused_by_name_and_the_segment_scanned_instead(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    newer = bytearray(segment_index())
    newer[4] = 2  # a later layout may differ anywhere after its version byte
    with pytest.raises(NewerLayout, match=r"segment index version 2 is from a newer release.*1"):
        decode_index(bytes(newer))
    damaged = bytearray(segment_index())
    damaged[-1] ^= 0xFF
    with pytest.raises(InvalidParameter, match="checksum") as bad:
        decode_index(bytes(damaged))
    assert not isinstance(bad.value, NewerLayout)
    # A store meeting one falls back to the segment (the truth), names the file and both
    # versions, and leaves the index for the release that wrote it.
    store = FileSegmentStore(tmp_path, indexes=True)
    messages = [StoredMessage(f"m-{i}", 5 + i, b"body", False, (), T0 + i) for i in range(2)]
    frames = [
        frame_record(m.seq, T0 + i, T0 + i, record_tail(m.id, False, (), m.body))
        for i, m in enumerate(messages)
    ]
    size = store.append("q", 5, messages, frames)
    store.seal("q", 5)
    store.flush()
    store.close()
    idx = tmp_path / "q" / f"{5:020d}.idx"
    idx.write_bytes(bytes(newer))
    again = FileSegmentStore(tmp_path, indexes=True)
    with caplog.at_level("WARNING", logger="cmq.fsm.segments"):
        rec = again.recover({"q": [SegmentLayout(5, 2, size, sealed=True)]})
    assert list(rec["q"][0].sent_at) == [T0, T0 + 1]
    assert again.last_recovery.scanned == 1 and again.last_recovery.indexed == 0
    assert str(idx) in caplog.text and "version 2" in caplog.text and "version 1" in caplog.text
    assert idx.read_bytes() == bytes(newer)
    again.close()


def test_a_newer_catalog_image_is_refused_by_its_version_not_its_new_fields() -> None:
    image = orjson.loads(CatalogMachine().snapshot())
    newer = orjson.dumps(image | {"version": 2, "a_later_field": [1]})
    with pytest.raises(NewerFormat) as err:
        CatalogMachine().restore(30, newer)
    msg = str(err.value)
    assert "catalog snapshot at 30 has version 2" in msg and "up to 1" in msg and RELEASE in msg
    with pytest.raises(InvariantBroken, match="undecodable catalog snapshot") as bad:
        CatalogMachine().restore(31, orjson.dumps(image | {"a_later_field": [1]}))
    assert not isinstance(bad.value, NewerFormat)


# -- 13. time-to-live deadlines on forwarded replies -----------------------------------------------


def test_forwarded_replies_with_ttl_deadlines_read_both_ways() -> None:
    """A received and an exported message gained ``ttl_deadline_ms``: in a forwarded reply
    (msgpack maps by field name) a node of the previous release ignores the new key, and this
    release reads a previous node's reply (no key) as no deadline."""
    from dataclasses import dataclass

    from cmq.export_values import LiveMessage
    from cmq.model import ReceivedMessage

    @dataclass(frozen=True)
    class OldReceived:  # ReceivedMessage as release 0.3.0 declares it
        id: str
        seq: int
        body: bytes
        binary: bool
        receipt: str
        receive_count: int
        sent_at_ms: int
        attributes: tuple[tuple[str, str], ...]
        group_id: str | None = None
        dedup_id: str | None = None

    new = ReceivedMessage("m", 1, b"x", False, "r", 1, 5, (), None, None, 9_000)
    old = msgspec.msgpack.decode(msgspec.msgpack.encode([new]), type=list[OldReceived])
    assert old == [OldReceived("m", 1, b"x", False, "r", 1, 5, ())]
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(old), type=list[ReceivedMessage])
    assert back == [ReceivedMessage("m", 1, b"x", False, "r", 1, 5, ())]
    live = LiveMessage("m", 1, b"x", False, 5, (), "visible", 0, 0, ttl_deadline_ms=9_000)
    raw = msgspec.to_builtins(live)
    assert raw["ttl_deadline_ms"] == 9_000
    del raw["ttl_deadline_ms"]
    assert msgspec.convert(raw, LiveMessage).ttl_deadline_ms is None
