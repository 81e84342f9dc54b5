"""The fuzz targets: one property check per binary or text decoder that reads bytes from outside.

Each target's `check` takes one input and either returns True (the decoder returned a value,
and where an encoder exists the value survives ``decode(encode(value)) == value``) or False (the
decoder raised its package's documented decode error), or raises anything else, which the
fuzzer reports as a finding. The checks are plain functions: atheris drives them in
`tests.fuzz.run`, and the regression tests call them directly with the inputs that once failed.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

import msgspec

from api.decoding import decode as decode_request
from api.routes import ROUTES
from api.sqs import protocol as sqs_protocol
from api.sqs.errors import SqsError
from cmq.errors import CmqError, InvalidParameter, InvariantBroken, ReceiptInvalid
from cmq.fsm.commands import decode_command, encode_command
from cmq.fsm.image import decode_image
from cmq.fsm.segments import MemorySegmentStore
from cmq.fsm.store import SegmentLayout, encode_record
from cmq.routing.receipts import ReceiptSigner
from cmq.routing.rpc import decode_call, decode_error
from raftlog.errors import InvariantViolation, NewerFormat
from raftlog.runtime.statemachine import decode_batch, encode_batch
from raftlog.storage.record import decode_record
from raftlog.storage.record import encode_record as encode_log_record
from raftlog.transport import codec, resume

CORPUS = Path(__file__).parent / "corpus"
"""The committed seed corpus: one directory per target."""
RECEIPT_KEY = b"fuzz-receipt-key-0123456789"
"""The receipt key of the receipt target (any key of 16+ bytes; fixed so seeds verify)."""
SEGMENT_QUEUE = "fuzzed"
SEGMENT_FIRST_SEQ = 1
"""A segment input is one count byte (the records a snapshot says the segment holds) and the
segment file of queue `SEGMENT_QUEUE` whose first record has seq `SEGMENT_FIRST_SEQ`."""


@dataclass(frozen=True, slots=True)
class Target:
    """A decoder under fuzzing: ``check(data)`` is the property for one input."""

    name: str
    check: Callable[[bytes], bool]
    about: str


def _transport(data: bytes) -> bool:
    """A peer frame as the transport reads it: the 5-byte header, then the body decoded by
    kind. Documented error: `CodecError` (the connection is dropped)."""
    if len(data) < codec.FRAME_HEADER.size:
        return False
    try:
        kind, length = codec.parse_header(data[: codec.FRAME_HEADER.size], codec.DEFAULT_MAX_FRAME)
        body = data[codec.FRAME_HEADER.size :][:length]
        if kind is codec.FrameKind.RAFT:
            messages = codec.decode_messages(body)
            assert codec.decode_messages(codec.encode_messages(messages)) == messages
        elif kind in (codec.FrameKind.BEATS, codec.FrameKind.QUIESCE):
            beats = codec.decode_beats(body)
            assert codec.decode_beats(codec.encode_beats(beats)) == beats
        elif kind is codec.FrameKind.BEAT_ACKS:
            acks = codec.decode_beat_acks(body)
            assert codec.decode_beat_acks(codec.encode_beat_acks(acks)) == acks
        elif kind in (codec.FrameKind.HELLO, codec.FrameKind.CHALLENGE):
            node, nonce = codec.decode_hello(body)
            assert codec.decode_hello(codec.encode_hello(node, nonce)) == (node, nonce)
        elif kind in (codec.FrameKind.CALL, codec.FrameKind.REPLY):
            call = codec.decode_call(body)
            assert codec.decode_call(codec.encode_call(*call)) == call
        elif kind is codec.FrameKind.CHUNK:
            _chunks(body)
        elif kind is codec.FrameKind.CHUNK_STATE:
            state = resume.decode_state(body)
            assert resume.decode_state(resume.encode_state(state)) == state
    except codec.CodecError:
        return False
    return True


def _chunks(body: bytes) -> bool:
    """A CHUNK body fed to a `Reassembly` (whose out-of-order, oversize and CRC refusals are
    `CodecError` too); then the chunk's data split into a run of chunks reassembles to itself."""
    chunk = codec.decode_chunk(body)
    assert codec.decode_chunk(codec.encode_chunk(chunk)) == chunk
    with contextlib.suppress(codec.CodecError):
        done = resume.Reassembly(max_bytes=1 << 16).add(chunk)
        assert done is None or done == (chunk.kind, chunk.data)
    reassembly = resume.Reassembly(max_bytes=len(chunk.data))
    pieces = codec.split_chunks(chunk.transfer, chunk.kind, chunk.data, 7)
    results = [reassembly.add(piece) for piece in pieces]
    assert results == [None] * (len(pieces) - 1) + [(chunk.kind, chunk.data)]
    return True


def _raft_messages(data: bytes) -> bool:
    """The body of a RAFT frame (batched Raft messages of many groups)."""
    try:
        messages = codec.decode_messages(data)
    except codec.CodecError:
        return False
    assert codec.decode_messages(codec.encode_messages(messages)) == messages
    return True


def _log_record(data: bytes) -> bool:
    """A Raft log file frame (entries, hard state, snapshot marker, conf, drop); documented
    error: ``ValueError`` naming the problem."""
    try:
        group, record, end = decode_record(data)
    except ValueError:
        return False
    again = encode_log_record(group, record)
    assert again == data[:end]
    assert decode_record(again)[:2] == (group, record)
    return True


def _batch(data: bytes) -> bool:
    """A committed entry's batch of commands; documented errors: `InvariantViolation`, and
    `NewerFormat` for a batch version above this release's."""
    try:
        commands = decode_batch(data)
    except (InvariantViolation, NewerFormat):
        return False
    assert decode_batch(encode_batch(commands)) == commands
    return True


def _command(data: bytes) -> bool:
    """One queue state machine command; documented error: `InvalidParameter`."""
    try:
        command = decode_command(data)
    except InvalidParameter:
        return False
    assert decode_command(encode_command(command)) == command
    return True


def _forwarded(data: bytes) -> bool:
    """A forwarded call (`InvalidParameter`), its reply decoder, and an error reply (never
    raises: anything unreadable is `Unavailable`)."""
    error = decode_error(data)
    assert error is None or isinstance(error, CmqError)
    try:
        call = decode_call(data)
    except InvalidParameter:
        return False
    assert decode_call(call.encode()) == call
    with contextlib.suppress(InvalidParameter):
        result = call.decode_reply(data)
        assert call.decode_reply(call.encode_reply(result)) == result
    return True


def _receipt(data: bytes) -> bool:
    """A receipt handle as a client returns it: the input as text (`ReceiptInvalid` unless
    minted with the key); then receipts minted from the input's numbers (layout 1, and a run of
    layout 2) verify to them and refuse another queue."""
    signer = ReceiptSigner(RECEIPT_KEY)
    text = data.decode("utf-8", "replace")
    try:
        verified = signer.verify("q", text) is not None
    except ReceiptInvalid:
        verified = False
    seq, lease = struct.unpack(">QQ", data[:16].ljust(16, b"\0"))
    queue = data[16:40].decode("utf-8", "replace")
    receipt = signer.mint(queue, seq, lease)
    assert signer.verify(queue, receipt) == (seq, lease)
    seq &= 2**63 - 1  # a layout-2 seq is refused beyond i64 (it is not under the MAC)
    pairs = [(seq, lease), (seq ^ 1, (lease + 1) % 2**64)]
    run = signer.mint_leased(queue, pairs, runs_ok=True)
    assert signer.verify_many(queue, run) == pairs
    for other in (receipt, *run):
        if not isinstance(signer.verify_many(queue + "x", [other])[0], ReceiptInvalid):
            raise AssertionError("a receipt verified for another queue")
    return verified


def _segment(data: bytes) -> bool:
    """A segment file read back as a restore does (`recover` to a snapshot's layout), then
    record by record; documented error: `InvariantBroken` naming the file and offset. What
    reads back re-encodes to the same bytes."""
    if not data:
        return False
    count, file = data[0], data[1:]
    store = MemorySegmentStore(cache_bytes=0)
    store.install(SEGMENT_QUEUE, SEGMENT_FIRST_SEQ, file)
    layout = SegmentLayout(SEGMENT_FIRST_SEQ, count, len(file))
    try:
        (recovered,) = store.recover({SEGMENT_QUEUE: [layout]})[SEGMENT_QUEUE]
        again = b""
        for rel in range(count):
            seq = SEGMENT_FIRST_SEQ + rel
            message = store.read(SEGMENT_QUEUE, SEGMENT_FIRST_SEQ, seq)
            assert message.seq == seq
            assert message.sent_at_ms == recovered.sent_at[rel]
            again += encode_record(message, recovered.visible_at[rel])
    except InvariantBroken:
        return False
    assert again == file
    return True


def _image(data: bytes) -> bool:
    """A snapshot image of a data group; documented error: `InvariantBroken`."""
    try:
        decode_image(data)
    except InvariantBroken:
        return False
    return True


def _sqs_query(data: bytes) -> bool:
    """A query-protocol form body as the SQS endpoint reads it: UTF-8, ``parse_qsl`` (strict),
    then the flattened-parameter parser; documented error: `SqsError` (MalformedQueryString)."""
    try:
        pairs = parse_qsl(data.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        return False  # the endpoint answers MalformedQueryString before the parser runs
    try:
        params = sqs_protocol.query_params(pairs)
    except SqsError:
        return False
    assert isinstance(params, dict)
    return True


def _sqs_json(data: bytes) -> bool:
    """A JSON-protocol body; documented error: `SqsError` (SerializationError)."""
    try:
        params = sqs_protocol.json_params(data)
    except SqsError:
        return False
    assert isinstance(params, dict)
    return True


_MODELS = sorted({r.request for r in ROUTES if r.request is not None}, key=lambda m: m.__name__)


def _api_json(data: bytes) -> bool:
    """A native API request body, the first byte choosing the route's model; documented error:
    a `CmqError` (an `InvalidParameter` subclass with the field's path); a decoded body
    re-encodes to an equal value."""
    if not data:
        return False
    model = _MODELS[data[0] % len(_MODELS)]
    try:
        value = decode_request(data[1:], model)
    except CmqError:
        return False
    assert decode_request(msgspec.json.encode(value), model) == value
    return True


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("transport_frame", _transport, "peer frame header and every frame body"),
        Target("raft_messages", _raft_messages, "raftlog message codec (RAFT frame body)"),
        Target("log_record", _log_record, "raftlog log-file record frames"),
        Target("command_batch", _batch, "raftlog committed entry batches"),
        Target("queue_command", _command, "cmq queue/catalog state machine commands"),
        Target("forwarded_call", _forwarded, "cmq forwarded calls, replies and error replies"),
        Target("receipt", _receipt, "receipt handles"),
        Target("segment_records", _segment, "segment files read back on restore"),
        Target("snapshot_image", _image, "data group snapshot images"),
        Target("sqs_query", _sqs_query, "SQS query-protocol form parser"),
        Target("sqs_json", _sqs_json, "SQS JSON-protocol body"),
        Target("api_json", _api_json, "native API JSON request bodies"),
    )
}
