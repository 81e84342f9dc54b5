"""The data-group state machine: commands, the queue machine and segment stores.

`cmq.fsm.machine` (command dispatch, queue commands, snapshot and restore), `cmq.fsm.queue`
(per-queue state and the changes several commands share), `cmq.fsm.queuetime` (its time, timers and
time-to-live deadlines), `cmq.fsm.timedwork` (the timed work due on a queue), `cmq.fsm.messages` and
`cmq.fsm.leasing` (the message commands), `cmq.fsm.lifecycle` (archive claims, copy-forward, the
records stream), `cmq.fsm.rewind`, `cmq.fsm.writer` (segment appends, seals, deletions, releases),
`cmq.fsm.effects`, `cmq.fsm.image` (snapshot image), `cmq.fsm.commands` (commands and their codec)
and the rest are pure: no clock, randomness, threads, sockets or files, and nothing of the node, the
routing or Raft's runtime (the import contract ``fsm-pure`` in pyproject.toml). File I/O lives in
`cmq.fsm.segments` alone; its in-memory twin is `cmq.fsm.memory`.
"""

from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    ClaimSegments,
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
    MarkArchived,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    Purged,
    Result,
    Rewind,
    Rewound,
    SegmentsArchived,
    SegmentsClaimed,
    SetAttributes,
    Tidied,
    Tidy,
    decode_command,
    encode_command,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.memory import MemorySegmentStore
from cmq.fsm.segments import FileSegmentStore
from cmq.fsm.store import SegmentStore, StoredMessage

__all__ = [
    "Ack",
    "ChangeVisibility",
    "ClaimSegments",
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
    "MarkArchived",
    "MemorySegmentStore",
    "Nack",
    "NewMessage",
    "Produce",
    "Produced",
    "Purge",
    "Purged",
    "QueueMachine",
    "Result",
    "Rewind",
    "Rewound",
    "SegmentStore",
    "SegmentsArchived",
    "SegmentsClaimed",
    "SetAttributes",
    "StoredMessage",
    "Tidied",
    "Tidy",
    "decode_command",
    "encode_command",
]
