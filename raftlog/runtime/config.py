"""The runtime's settings and small shared types, apart from `raftlog.runtime.multiraft` (which
re-exports them): `RuntimeConfig`, `SendCounters`, `RemoteCallError` and `new_event_loop`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from raftlog.errors import RaftError
from raftlog.runtime.group_options import GroupOptions
from raftlog.storage import WalOptions
from raftlog.transport.address import Address
from raftlog.transport.config import TransportConfig


class RemoteCallError(RaftError):
    """A forwarded call failed on the peer; ``payload`` is the peer's error reply."""

    retriable = True
    code = "RemoteCallError"

    def __init__(self, payload: bytes) -> None:
        super().__init__(payload.decode("utf-8", "replace"))
        self.payload = payload


try:  # uvloop is optional: the runtime works on the default loop too.
    import uvloop

    def new_event_loop() -> asyncio.AbstractEventLoop:
        """A uvloop event loop (installed on this platform)."""
        return uvloop.new_event_loop()

except ImportError:  # pragma: no cover - non-Linux

    def new_event_loop() -> asyncio.AbstractEventLoop:
        """The default asyncio event loop (uvloop is not installed)."""
        return asyncio.new_event_loop()


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """One node's runtime settings."""

    node_id: int
    listen: Address
    peers: dict[int, Address]
    """Every node of the cluster (this one included) by id."""
    secret: bytes
    data_dirs: tuple[str, ...]
    tick_interval: float = 0.05
    election_tick: int = 10
    heartbeat_tick: int = 1
    max_wal_segments: int = 4
    """More live WAL segments than this in a directory: the groups pinning the oldest one are
    snapshotted so it can be deleted."""
    pin_check_ticks: int = 20
    snapshot_every_ticks: int = 6000
    """Also snapshot every group that applied anything since its last snapshot this often
    (6000 ticks = 5 minutes at 50 ms), so a restart replays little even when traffic is low."""
    clock_probe_ticks: int = 10
    """Probe every peer's wall clock this often (10 ticks = 0.5 s at 50 ms): the readings feed
    `clock_readings`, and the answers prove the peer alive (`silent_for`)."""
    quiesce: bool = True
    """Stop ticking idle groups (see the module docstring); False: tick every group always."""
    liveness_ticks: int = 10
    """A peer silent for this many ticks is suspect: quiesced groups wake (their followers
    first catch up the missed ticks, so a limit up to ``election_tick`` delays no election)."""
    beat_every_ticks: int = 2
    """Send every peer a liveness frame each this many ticks (at most a quarter of
    ``liveness_ticks``, so a late frame or two never makes a live peer suspect): every other
    tick halves a resting node's frames without slowing the detection of a silent peer by
    more than a tick."""
    seed: int | None = None
    """Seed for election-timeout randomization (None: from the OS)."""
    rejoin: bool = False
    """This node lost its data and restarts under its old id: every group starts in the core's
    rejoin mode (no votes until caught up from a leader; see `raftlog.core.Config.rejoin`)."""
    group_options: GroupOptions = field(default_factory=GroupOptions)
    wal_options: WalOptions = field(default_factory=WalOptions)
    transport: TransportConfig = field(default_factory=TransportConfig)


@dataclass(slots=True)
class SendCounters:
    """What this node sent: appends (and the entries/bytes they carried: the append batch
    size is ``append_entries / appends``), and outbox flushes (one per event-loop turn with
    traffic; each flush is at most one frame of each kind per peer)."""

    appends: int = 0
    append_entries: int = 0
    append_bytes: int = 0
    flushes: int = 0
