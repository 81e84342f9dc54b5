"""Pure, deterministic Raft: messages and ticks in, a `Ready` out. No I/O, clocks or asyncio.

See `raftlog.core.rawnode` for the driving loop and `raftlog.core.types.Ready` for the contract.
"""

from raftlog.core.config import Config, UnsafeHooks
from raftlog.core.rawnode import PeerStatus, RawNode, Status
from raftlog.core.storage import MemoryStorage, Storage, bootstrap_snapshot
from raftlog.core.types import (
    NONE,
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    Ready,
    Role,
    Snapshot,
    SnapshotMeta,
    SoftState,
    must_sync,
)

__all__ = [
    "NONE",
    "ConfChange",
    "ConfChangeKind",
    "ConfState",
    "Config",
    "Entry",
    "EntryKind",
    "HardState",
    "MemoryStorage",
    "Message",
    "MsgType",
    "PeerStatus",
    "RawNode",
    "Ready",
    "Role",
    "Snapshot",
    "SnapshotMeta",
    "SoftState",
    "Status",
    "Storage",
    "UnsafeHooks",
    "bootstrap_snapshot",
    "must_sync",
]
