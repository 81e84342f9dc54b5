"""The data-group state machine: commands, the queue machine and segment stores.

`cmq.fsm.machine` (command dispatch), `cmq.fsm.queue` (per-queue state and its queries),
`cmq.fsm.image` (snapshot image) and `cmq.fsm.commands` are pure (no os/asyncio/time); file I/O
lives in `cmq.fsm.segments`.
"""

from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    Command,
    CommandFailed,
    CommandType,
    Created,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Done,
    EntryOutcomes,
    Expire,
    Expired,
    Lease,
    Leased,
    LeasedMessage,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    Purged,
    Result,
    SetAttributes,
    decode_command,
    encode_command,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import FileSegmentStore, MemorySegmentStore
from cmq.fsm.store import SegmentStore, StoredMessage

__all__ = [
    "Ack",
    "ChangeVisibility",
    "Command",
    "CommandFailed",
    "CommandType",
    "CreateQueue",
    "Created",
    "DeadLetter",
    "DeleteQueue",
    "Done",
    "EntryOutcomes",
    "Expire",
    "Expired",
    "FileSegmentStore",
    "Lease",
    "Leased",
    "LeasedMessage",
    "MemorySegmentStore",
    "Nack",
    "NewMessage",
    "Produce",
    "Produced",
    "Purge",
    "Purged",
    "QueueMachine",
    "Result",
    "SegmentStore",
    "SetAttributes",
    "StoredMessage",
    "decode_command",
    "encode_command",
]
