"""Golden bytes: every format's fixed sample (`tests.formats.samples`) must encode to the bytes
recorded in ``golden/formats.json`` for its current version, and decode back where a reader
exists. A mismatch means a format changed without a version bump: old and new nodes replicate
the same groups during a rolling upgrade, so a release writes what the previous one reads, and
a new layout is written only behind a feature flag (`cmq.upgrade.features`) once enabled.

To record new golden bytes deliberately (after bumping the format's version and gating the new
layout behind a flag), run from the repository root::

    PYTHONPATH=. python -m tests.formats.test_golden --write

and review the diff of ``tests/formats/golden/formats.json``: a changed line of an existing
sample at an unchanged version is exactly what this test exists to stop.
"""

from __future__ import annotations

import sys
import typing

import msgspec
import pytest

from cmq import stream
from cmq.catalog.meta import CatalogMachine
from cmq.frontend import calls, wire
from cmq.fsm import commands as qc
from cmq.fsm.image import decode_image
from cmq.fsm.segindex import decode_index, encode_index
from cmq.fsm.store import decode_payload
from cmq.routing import rpc
from cmq.routing.receipts import ReceiptSigner
from raftlog.runtime.statemachine import decode_batch
from raftlog.storage import record as wal
from raftlog.storage.files import decode_snapshot_file
from raftlog.transport import codec
from tests.formats.samples import (
    ACK_RUNS,
    FORWARDED_FAILURES,
    GOLDEN,
    RECEIPT_KEY,
    T0,
    Golden,
    front_end_answers,
    front_end_calls,
    queue_commands,
    queue_machine,
    samples,
    stream_answers,
    stream_requests,
)

HINT = (
    "bump its version, gate the new layout behind a feature flag (cmq/upgrade/features.py), and "
    "record "
    "new golden bytes (PYTHONPATH=. python -m tests.formats.test_golden --write)"
)


def _recorded() -> dict[str, Golden]:
    return msgspec.json.decode(GOLDEN.read_bytes(), type=dict[str, Golden])


def _current() -> dict[str, Golden]:
    return {name: Golden(version, build().hex()) for name, (version, build) in samples().items()}


RECORDED = _recorded() if GOLDEN.exists() else {}


@pytest.mark.parametrize("name", sorted(samples()))
def test_format_is_unchanged(name: str) -> None:
    version, build = samples()[name]
    assert name in RECORDED, f"format {name} has no golden bytes: record them ({HINT})"
    golden = RECORDED[name]
    if golden.version != version:
        pytest.fail(
            f"format {name} is now version {version}, golden bytes are of version "
            f"{golden.version}: record new golden bytes for it ({HINT})"
        )
    got = build().hex()
    if got != golden.hex:
        pytest.fail(
            f"format {name} changed without a version bump: {HINT}.\n"
            f"  golden : {golden.hex}\n  current: {got}"
        )


def test_every_recorded_format_still_has_a_sample() -> None:
    missing = sorted(set(RECORDED) - set(samples()))
    assert not missing, f"golden bytes without a sample (a format dropped?): {missing}"


# -- the golden bytes still decode (a reader change is caught too) -------------------------------


def _golden(name: str) -> bytes:
    return bytes.fromhex(RECORDED[name].hex)


def test_golden_wal_records_decode() -> None:
    for name in RECORDED:
        if name.startswith("wal_record."):
            group, record, end = wal.decode_record(_golden(name))
            assert group == 7 and end == len(_golden(name))
            assert wal.encode_record(group, record) == _golden(name)


def test_golden_batch_snapshot_file_and_peer_frames_decode() -> None:
    assert decode_batch(_golden("proposal_batch")) == [b"first", b"", b"third"]
    assert decode_snapshot_file("f", _golden("snapshot_file"), 7, 9, 3) == b"img"
    for name in RECORDED:
        if name.startswith("peer_frame."):
            raw = _golden(name)
            kind, size = codec.parse_header(raw[: codec.FRAME_HEADER.size], 1 << 20)
            assert size == len(raw) - codec.FRAME_HEADER.size
            body = raw[codec.FRAME_HEADER.size :]
            if kind is codec.FrameKind.RAFT:
                assert codec.encode_messages(codec.decode_messages(body)) == body
            elif kind is codec.FrameKind.CHUNK:
                assert codec.encode_chunk(codec.decode_chunk(body)) == body


def test_golden_queue_commands_decode() -> None:
    for name, cmd in queue_commands().items():
        assert qc.decode_command(_golden(f"queue_command.{name}")) == cmd, name
    assert qc.decode_command(_golden("queue_command_ack_runs")) == ACK_RUNS


def test_golden_catalog_image_segments_and_images_restore() -> None:
    cat = CatalogMachine()
    cat.restore(5, _golden("catalog_image"))
    assert cat.snapshot() == _golden("catalog_image")
    raw = _golden("segment_records")
    first, _ = decode_payload(memoryview(raw)[8 : 8 + int.from_bytes(raw[:4], "little")])
    assert (first.id, first.seq, first.body, first.priority) == ("msg-0001", 5, b"hello", 0)
    leveled = memoryview(_golden("segment_records.leveled"))
    size = int.from_bytes(leveled[:4], "little")
    second, _ = decode_payload(leveled[8 + size + 8 :])
    assert (second.id, second.seq, second.binary, second.priority) == ("msg-0004", 8, True, 31)
    index = decode_index(_golden("segment_index"))
    assert (index.first_seq, index.count, index.size) == (5, 2, len(raw))
    assert list(index.sent_at) == [T0, T0 + 1]
    assert list(index.visible_at) == [T0 + 1_000, T0 + 1]
    assert encode_index(index) == _golden("segment_index")
    for skew, name in ((False, "data_group_image.v2"), (True, "data_group_image.v3")):
        image = _golden(name)
        assert image[4] == (3 if skew else 2)
        decode_image(image)
        m, _ = queue_machine(skew)
        m.restore(9, image)
        assert m.encode_image(reuse=False) == image


def test_golden_receipt_and_stream_frames_decode() -> None:
    signer = ReceiptSigner(RECEIPT_KEY)
    assert signer.verify("q", _golden("receipt").decode()) == (5, 9)
    run = _golden("receipt.run").decode().split("\n")
    assert signer.verify_many("q", run) == [(5, 9), (7, 10)]
    assert stream.decode_requests(_golden("stream.requests")) == [
        _as_read(r) for r in stream_requests()
    ]
    assert stream.decode_answers(_golden("stream.answers")) == [
        _answer_as_read(a) for a in stream_answers()
    ]


def test_golden_forwarded_failures_decode_with_their_leader_and_retry_after() -> None:
    as_json = _golden("forwarded_failure.json").split(b"\n")
    packed = [bytes.fromhex(p.decode()) for p in _golden("forwarded_failure.packed").split(b"\n")]
    assert [rpc.decode_failure(p) for p in packed] == list(FORWARDED_FAILURES)
    dropped = [msgspec.structs.replace(f, retry_after=None) for f in FORWARDED_FAILURES]
    # The JSON form names a leader on a Retry only and never carries retry_after.
    assert [rpc.decode_failure(p) for p in as_json] == dropped
    assert [rpc.leader_hint(p) for p in as_json] == [3, 0, 0]


def _answer_as_read(answer: stream.Answer) -> stream.Answer:
    """``answer`` as the client decodes it: a server's unhinted `stream.PlainSent` (and the
    others) is read as the full frame with no ``leader``."""
    plain: dict[type, type] = {
        stream.PlainSent: stream.Sent,
        stream.PlainDeliver: stream.Deliver,
        stream.PlainResults: stream.Results,
    }
    full = plain.get(type(answer))
    if full is None:
        return answer
    fields = [getattr(answer, f) for f in answer.__struct_fields__]
    return full(*fields)  # type: ignore[no-any-return]


def _as_read(request: stream.Request) -> stream.Request:
    """``request`` as the server decodes it: a client's `stream.PlainMessage` is read as a
    `stream.Message` without ``deliver_at``."""
    if not isinstance(request, stream.Send):
        return request
    messages = [
        stream.Message(*msgspec.structs.astuple(m)) if isinstance(m, stream.PlainMessage) else m
        for m in request.messages
    ]
    return stream.Send(request.id, request.queue, messages)


def _frames(data: bytes) -> list[bytes]:
    """The frames of the front-end socket in ``data``, each without its length."""
    out = []
    while data:
        (size,) = wire.HEAD.unpack(data[: wire.HEAD.size])
        out.append(data[wire.HEAD.size : wire.HEAD.size + size])
        data = data[wire.HEAD.size + size :]
    return out


def test_golden_front_end_frames_decode() -> None:
    requests = [wire.decode_request(f) for f in _frames(_golden("front_end.requests"))]
    every = front_end_calls()
    assert requests == [*enumerate(every, 1), (1, None)]
    assert {type(c) for c in every} == set(typing.get_args(calls.AnyCall))
    answers = [wire.decode_answer(f) for f in _frames(_golden("front_end.answers"))]
    for (rid, ok, payload), (expected_id, call, result) in zip(
        answers, front_end_answers(), strict=True
    ):
        assert rid == expected_id
        if ok:
            assert call.decode_result(payload) == result
        else:
            error = wire.decode_failure(payload)
            assert (type(error), error.message, error.retry_after) == (
                type(result),
                result.message,
                result.retry_after,
            )


def write() -> None:
    """Record the current bytes of every sample as golden (see the module docstring)."""
    GOLDEN.parent.mkdir(exist_ok=True)
    data = msgspec.json.format(msgspec.json.encode(dict(sorted(_current().items()))), indent=1)
    GOLDEN.write_bytes(data + b"\n")
    print(f"wrote {len(_current())} samples to {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.formats.test_golden --write")
    write()
