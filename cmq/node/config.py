"""`NodeConfig`: one node's settings, as `cmq.cli.serve` reads them from flags, the environment or
a TOML file and `cmq.node.queue_node.QueueNode` is built from them. Values only: nothing here
opens, binds or reads anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cmq.model import DEFAULT_SEGMENT_AGE_SECONDS, DEFAULT_SEGMENT_BYTES
from cmq.node.clockguard import DEFAULT_BOUND_MS
from cmq.node.diskwatch import DEFAULT_RESERVE_BYTES, DEFAULT_SLOW_FSYNC_SECONDS
from cmq.node.peer_tls import PeerTlsFiles
from raftlog.runtime import GroupOptions
from raftlog.transport import Address

__all__ = ["NodeConfig"]


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """One node's settings (from flags, environment or a TOML file; see `cmq.cli.serve`)."""

    node_id: int
    peer: Address
    peers: dict[int, Address]
    """The founding nodes by id (this one included), or, for a node that joined
    (``join``), the nodes the cluster named when it joined."""
    data_dirs: tuple[str, ...]
    secret: bytes
    groups: int = 4
    """Data groups (the meta group is extra)."""
    request_timeout: float = 10.0
    max_inflight_sends: int = 24
    """Sends this node carries at once (from receiving the request to its confirm); more wait
    their turn, up to the request deadline, then fail with `Overloaded`. Receives, acks and
    other calls never wait for these slots, so consumers are not queued behind a burst of
    producers: on a saturated node every queued send delays every Raft turn, and with it the
    commits consumers wait for."""
    coalesce_sends: bool = True
    """At the leader, the sends to one standard queue that arrive in one turn of the event loop
    are proposed as one `Produce` (`cmq.routing.coalesce`); off: one `Produce` per send."""
    tick_interval: float = 0.05
    housekeeping_interval: float = 1.0
    group_options: GroupOptions = field(default_factory=GroupOptions)
    rejoin: bool = False
    """Start after losing this node's data (see `RuntimeConfig.rejoin`)."""
    join: tuple[str, ...] = ()
    """HTTP URLs of running nodes to join through (``--join``); `cmq.cli.server` registers the
    node there before starting it (then ``joined``)."""
    joined: bool = False
    """This node joined a running cluster: it founds nothing and follows the catalog as a
    learner until it is given replicas; ``peers`` are the nodes the cluster named."""
    replication: int = 3
    """Voting replicas per data group (fewer when fewer nodes are active)."""
    meta_voters: int = 3
    """Voters of the meta group kept among active nodes (never fewer than its founders)."""
    zone: str = ""
    http: str = ""
    """This node's HTTP address (host:port), recorded in the catalog for `cmq node list`."""
    membership_interval: float = 0.2
    balance_leaders: bool = True
    segment_max_bytes: int = DEFAULT_SEGMENT_BYTES
    """Queues created through this node seal a segment at this size (recorded per queue)..."""
    segment_max_age: float = DEFAULT_SEGMENT_AGE_SECONDS
    """...or at this age in seconds (by the queue's clock, checked by housekeeping too)."""
    scrub_rate: float = 2 << 20
    """Bytes per second the scrubber re-reads at most (`cmq.node.scrubber`; 0: off)."""
    clock_bound_ms: float = DEFAULT_BOUND_MS
    """A clock further than this from the median of the peers' stops this node leading
    (``CMQ_CLOCK_BOUND_MS``; `cmq.node.clockguard`)."""
    peer_tls: PeerTlsFiles | None = None
    """Mutual TLS for peer traffic (`cmq.node.peer_tls`); None: plain TCP (the cluster-secret
    handshake alone authenticates peers)."""
    disk_reserve_bytes: int = DEFAULT_RESERVE_BYTES
    """Free space kept per data directory: below it sends are refused (`cmq.node.diskwatch`)."""
    slow_fsync_seconds: float = DEFAULT_SLOW_FSYNC_SECONDS
    """A WAL fsync this slow hands off the leadership of the groups on its directory."""
