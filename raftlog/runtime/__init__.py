"""The multi-Raft runtime: many groups per process on one event loop, bound to data directories.

Public API: `MultiRaft` (open groups with a `StateMachine`, propose and await the applied result,
change membership, transfer leadership, read status, take a frozen `RuntimeStats` snapshot of its
counters) configured by `RuntimeConfig`, and the seams it is given (`raftlog.runtime.host`: a
`PeerTransport`, `LogDisks`, a `Clock`, an `Offload`), each with a real implementation and an
in-memory twin; `RemoteCallError` (a peer call that failed there) and the clock verdicts a host's
guard reads (`ClockReading`, `ClockVerdict`, `judge`). A host imports these packages
(`raftlog.runtime`, `raftlog.storage`, `raftlog.transport`, `raftlog.core`, `raftlog.errors`),
never their modules (the import contract ``raftlog-face``).
"""

from raftlog.runtime.clocks import ClockReading, ClockVerdict, judge
from raftlog.runtime.config import RemoteCallError, RuntimeConfig, new_event_loop
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.group_options import DurableLog, GroupOptions, Offload
from raftlog.runtime.host import (
    SYSTEM_CLOCK,
    Clock,
    LogDisk,
    LogDisks,
    LoopClock,
    PeerTransport,
    SystemClock,
    inline,
)
from raftlog.runtime.multiraft import MultiRaft
from raftlog.runtime.statemachine import StateMachine, decode_batch, encode_batch
from raftlog.runtime.stats import GroupStats, PeerLinkStats, RuntimeStats, SentStats

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "ClockReading",
    "ClockVerdict",
    "DurableLog",
    "GroupDriver",
    "GroupOptions",
    "GroupStats",
    "LogDisk",
    "LogDisks",
    "LoopClock",
    "MultiRaft",
    "Offload",
    "PeerLinkStats",
    "PeerTransport",
    "RemoteCallError",
    "RuntimeConfig",
    "RuntimeStats",
    "SentStats",
    "StateMachine",
    "SystemClock",
    "decode_batch",
    "encode_batch",
    "inline",
    "judge",
    "new_event_loop",
]
