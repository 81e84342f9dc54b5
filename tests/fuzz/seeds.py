"""Seed inputs for the fuzz targets, each a real encoding made by the project's own encoders.

``python -m tests.fuzz.seeds`` rewrites ``tests/fuzz/corpus/<target>/`` (committed, small: the
fuzzer starts from these and mutates). Deterministic: the same code writes the same files.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import sys
from pathlib import Path

import orjson

from cmq.failure import Failure
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Lease,
    Nack,
    NewMessage,
    Produce,
    Purge,
    SetAttributes,
    encode_ack,
    encode_command,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import MemorySegmentStore
from cmq.fsm.store import StoredMessage, encode_record
from cmq.model import QueueAttributes
from cmq.routing.receipts import ReceiptSigner
from cmq.routing.rpc import (
    AckCall,
    CreateQueueCall,
    GetQueueCall,
    ProduceCall,
    ReceiveCall,
    SetAttributesCall,
    encode_failure,
)
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
from raftlog.storage.record import (
    ConfRecord,
    DropRecord,
    EntriesRecord,
    HardStateRecord,
    SnapshotRecord,
)
from raftlog.storage.record import (
    encode_record as encode_log_record,
)
from raftlog.transport import codec, resume
from tests.cmq.fsm.harness import legacy_produce
from tests.fuzz.targets import _MODELS, CORPUS, RECEIPT_KEY, SEGMENT_FIRST_SEQ

_ATTRS = QueueAttributes(visibility_timeout=10, dead_letter_queue="dlq", max_receive_count=3)
_PRODUCE = Produce(
    "orders",
    3_000,
    (
        NewMessage("m-1", b"hello", False, (("k", "v"),), None, None),
        NewMessage("m-2", b"\x00\xff", True, (), 5_000, "dedup"),
    ),
)
_COMMANDS = (
    CreateQueue("orders", _ATTRS, 1_000),
    DeleteQueue("orders"),
    SetAttributes("orders", QueueAttributes()),
    Purge("orders", 2_000),
    _PRODUCE,
    Lease("orders", 4_000, 10, 30_000),
    Ack("orders", 5_000, ((1, 7), (2, 8))),
    ChangeVisibility("orders", 6_000, ((1, 7, 0),)),
    Nack("orders", 7_000, ((3, 9),), 1_000),
    DeadLetter("orders", (4, 5)),
)
_MESSAGES = [
    (1, Message(MsgType.VOTE, to=2, frm=1, term=3, log_term=2, index=10)),
    (
        7,
        Message(
            MsgType.APP,
            to=3,
            frm=1,
            term=3,
            log_term=3,
            index=11,
            commit=10,
            entries=(
                Entry(3, 12, EntryKind.NORMAL, b"payload"),
                Entry(3, 13, EntryKind.CONF, b"\x01" + bytes(8)),
            ),
        ),
    ),
    (
        2,
        Message(
            MsgType.SNAP,
            to=2,
            frm=1,
            term=4,
            snapshot=Snapshot(SnapshotMeta(20, 4, ConfState((1, 2, 3), (4,))), b"image"),
        ),
    ),
]


def _transport() -> list[bytes]:
    chunks = codec.split_chunks(9, codec.FrameKind.RAFT, codec.encode_messages(_MESSAGES), 64)
    bodies = [
        (codec.FrameKind.RAFT, codec.encode_messages(_MESSAGES)),
        (codec.FrameKind.BEATS, codec.encode_beats([codec.Beat(1, 2, 3), codec.Beat(4, 5, 6)])),
        (codec.FrameKind.BEAT_ACKS, codec.encode_beat_acks([codec.BeatAck(1, 2)])),
        (codec.FrameKind.HELLO, codec.encode_hello(3, bytes(range(32)))),
        (codec.FrameKind.CALL, codec.encode_call(17, False, b"\x93\x01\x02\x03")),
        (codec.FrameKind.REPLY, codec.encode_call(17, True, b'{"error":"Retry"}')),
        (codec.FrameKind.CHUNK, codec.encode_chunk(chunks[0])),
        (codec.FrameKind.QUIESCE, codec.encode_beats([codec.Beat(7, 3, 40)])),
        (
            codec.FrameKind.CHUNK_STATE,
            resume.encode_state(
                resume.ChunkState(
                    True, resume.FrameKey(4, 256, 77), 2, (resume.FrameKey(2, 100, 5),)
                )
            ),
        ),
    ]
    return [codec.frame(kind, body) for kind, body in bodies]


def _log_records() -> list[bytes]:
    records = (
        EntriesRecord((Entry(1, 1, EntryKind.NORMAL, b"a"), Entry(1, 2, EntryKind.NORMAL, b""))),
        HardStateRecord(HardState(3, 2, 1)),
        SnapshotRecord(SnapshotMeta(5, 2, ConfState((1, 2, 3), (4,))), True),
        ConfRecord(ConfState((1, 2), ())),
        DropRecord(),
    )
    return [encode_log_record(7, r) for r in records]


def _calls() -> list[bytes]:
    calls = (
        ProduceCall(3, encode_command(_COMMANDS[4]), True),
        ReceiveCall(3, "orders", 10, 30, None),
        AckCall(3, "orders", ("r1", "r2")),
        CreateQueueCall(3, "orders", _ATTRS),
        GetQueueCall(3, "orders"),
        SetAttributesCall(3, "orders", (("delay_seconds", 1), ("dead_letter_queue", None))),
    )
    failure = encode_failure(Failure("QueueNotFound", "no such queue"), packed=False)
    return [c.encode() for c in calls] + [failure]


def _segments() -> list[bytes]:
    messages = [
        StoredMessage("m-1", SEGMENT_FIRST_SEQ, b"hello", False, (("k", "v"),), 1_000),
        StoredMessage("m-2", SEGMENT_FIRST_SEQ + 1, b"\x00\x01", True, (), 2_000),
        StoredMessage("m-3", SEGMENT_FIRST_SEQ + 2, b"", False, (("a", ""), ("b", "c")), 3_000),
    ]
    frames = [encode_record(m, m.sent_at_ms + 500) for m in messages]
    return [bytes([n]) + b"".join(frames[:n]) for n in (1, 3)]


def _image() -> bytes:
    machine = QueueMachine(MemorySegmentStore())
    for index, command in enumerate(_COMMANDS[:1] + _COMMANDS[4:6], start=1):
        machine.apply(index, encode_command(command))
    return machine.encode_image()


def _api_json() -> list[bytes]:
    names = [m.__name__ for m in _MODELS]
    bodies = {
        "CreateQueueRequest": {"attributes": {"visibility_timeout": 5}},
        "SendRequest": {"messages": [{"body": "hi", "attributes": {"k": "v"}, "delay_seconds": 1}]},
        "ReceiveRequest": {"max_messages": 5, "visibility_timeout": 10, "wait_seconds": 0},
        "AckRequest": {"receipts": ["abc", "def"]},
        "SetAttributesRequest": {"attributes": {"delay_seconds": 2}},
        "EmptyRequest": {},
    }
    return [bytes([names.index(n)]) + orjson.dumps(b) for n, b in bodies.items() if n in names]


_ACK_RUNS = Ack("orders", 5_000, ((1, 7), (2, 8), (3, 9)))
"""An ack encoded as runs (`ACK_RUNS`, flag ``batch_receipts``)."""


def seeds() -> dict[str, list[bytes]]:
    """Target name -> its seed inputs."""
    signer = ReceiptSigner(RECEIPT_KEY)
    return {
        "transport_frame": _transport(),
        "raft_messages": [codec.encode_messages(_MESSAGES), codec.encode_messages([])],
        "log_record": _log_records(),
        "command_batch": [encode_batch([encode_command(c) for c in _COMMANDS[:3]])],
        # The send as a log written before PRODUCE_RECORDS still holds it, too.
        "queue_command": [encode_command(c) for c in _COMMANDS]
        + [legacy_produce(_PRODUCE), encode_ack(_ACK_RUNS, runs_ok=True)],
        "forwarded_call": _calls(),
        "receipt": [
            signer.mint("q", 5, 9).encode(),
            signer.mint_leased("q", [(5, 9)], runs_ok=True)[0].encode(),
            struct.pack(">QQ", 1, 2) + b"orders",
        ],
        "segment_records": _segments(),
        "snapshot_image": [_image()],
        "sqs_query": [
            b"Action=SendMessageBatch&QueueUrl=http%3A%2F%2Fh%2F1%2Fq"
            b"&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=x"
            b"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=n"
            b"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String"
            b"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=v",
            b"Action=CreateQueue&QueueName=q&Attribute.1.Name=DelaySeconds&Attribute.1.Value=5"
            b"&Tag.1.Key=a&Tag.1.Value=b",
            b"Action=ReceiveMessage&MaxNumberOfMessages=10&AttributeName.1=All",
        ],
        "sqs_json": [
            b'{"QueueUrl": "http://h/1/q", "MessageBody": "x", "DelaySeconds": 1}',
            b"{}",
        ],
        "api_json": _api_json(),
    }


def write(root: Path = CORPUS) -> None:
    """Replace ``root``'s per-target directories with the current seeds."""
    for name, inputs in seeds().items():
        directory = root / name
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for data in inputs:
            (directory / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS)
