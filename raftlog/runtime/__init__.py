"""The multi-Raft runtime: many groups per process on one event loop, bound to data directories.

Public API: `MultiRaft` (open groups with a `StateMachine`, propose and await the applied result,
change membership, transfer leadership, read status, take a frozen `RuntimeStats` snapshot of its
counters) configured by `RuntimeConfig`.
"""

from raftlog.runtime.config import RuntimeConfig, new_event_loop
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.group_options import GroupOptions
from raftlog.runtime.multiraft import MultiRaft
from raftlog.runtime.statemachine import StateMachine, decode_batch, encode_batch
from raftlog.runtime.stats import GroupStats, PeerLinkStats, RuntimeStats, SentStats

__all__ = [
    "GroupDriver",
    "GroupOptions",
    "GroupStats",
    "MultiRaft",
    "PeerLinkStats",
    "RuntimeConfig",
    "RuntimeStats",
    "SentStats",
    "StateMachine",
    "decode_batch",
    "encode_batch",
    "new_event_loop",
]
