"""The typed bodies of the status routes (``/v1/status``, a group's digest): msgspec `Struct`s
like those of `api.models`, whose rules they follow. `QueueService.status()` returns a plain
dict, rendered as it is; these types only describe it in the OpenAPI document. Pure: no
aiohttp, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from api.models import _Response


class GroupStatus(_Response, kw_only=True):
    role: str
    recovering: Annotated[
        bool,
        Meta(
            description="restarted and waiting for peers before it may vote, or catching up "
            "what its disk lost"
        ),
    ] = False
    term: int
    leader: int
    commit: int
    applied: int
    last_index: int | UnsetType = UNSET
    voters: list[int]
    lag: Annotated[dict[str, int], Meta(description="peer -> entries behind (on the leader)")]
    stopped: (
        Annotated[
            str | None,
            Meta(description="why the group stopped here (a failed disk, a broken invariant)"),
        ]
        | UnsetType
    ) = UNSET


class ProtocolRange(_Response):
    """The peer protocols a release speaks: a connection runs at the highest both sides do."""

    min: int
    max: int


class NodeInfo(_Response, kw_only=True):
    address: str
    data_dirs: list[str]
    http: str = ""
    zone: str = ""
    state: Literal["active", "draining"] = "active"
    release: (
        Annotated[
            str,
            Meta(
                description="the release the node runs, as it last told the answering node "
                "(absent: no answer yet, or the node is down)"
            ),
        ]
        | UnsetType
    ) = UNSET
    protocol: ProtocolRange | UnsetType = UNSET
    reported: (
        Annotated[
            bool,
            Meta(
                description="false: the node predates release reporting (it refused the "
                "release call) and its release is inferred: 0.1.0"
            ),
        ]
        | UnsetType
    ) = UNSET


class MoveInfo(_Response):
    add: Annotated[int, Meta(description="the node joining the group")]
    remove: Annotated[int, Meta(description="the node leaving it (0: none)")]


class DataGroupInfo(_Response, kw_only=True):
    replicas: list[int]
    data_dirs: dict[str, str]
    queues: int
    move: MoveInfo | None = None


class ClockStatus(_Response, kw_only=True):
    """This node's clock against its peers' (``unsafe``: beyond the bound, it does not lead)."""

    offset_ms: Annotated[float, Meta(description="this clock minus the peers' median")]
    bound_ms: float
    unsafe: bool
    stepped: Annotated[
        bool, Meta(description="this clock jumped against the monotonic clock (not trusted)")
    ]
    verified: Annotated[
        bool,
        Meta(
            description="confirmed by peer readings since the start (a node with peers stamps "
            "nothing before)"
        ),
    ] = True
    peers_read: int
    off_peers: Annotated[list[int], Meta(description="peers seen beyond the bound")]


class RepairStatus(_Response, kw_only=True):
    """Repairs of this node's damaged replicas from the others (`raftlog.runtime.repair`)."""

    enabled: Annotated[
        bool, Meta(description="the self_repair feature flag is on (else damage stops the node)")
    ]
    under_repair: Annotated[
        dict[str, str],
        Meta(description="group -> what was found damaged; it votes again once caught up"),
    ]
    started: int
    completed: int


class ScrubStatus(_Response, kw_only=True):
    """The scrubber's progress (`cmq.node.scrubber`): what it re-read and found."""

    rate: Annotated[float, Meta(description="bytes per second at most (0: off)")]
    bytes: int
    segments: int
    snapshots: int
    passes: int
    findings: Annotated[int, Meta(description="damage found, each handed to repair")]


class DiskStatus(_Response, kw_only=True):
    """One data directory's health (`cmq.node.diskwatch`)."""

    directory: str
    state: Literal["ok", "failed", "full", "slow"]
    failed: Annotated[
        str | None, Meta(description="why its WAL stopped after an I/O error (restart the node)")
    ] = None
    errno: int | None = None
    free_bytes: int | None = None
    full: Annotated[bool, Meta(description="below the reserve: sends are refused (507)")]
    slow: Annotated[bool, Meta(description="fsyncs are slow: leadership is handed off")]
    fsync_seconds: Annotated[
        float, Meta(description="the fsync in progress so far or the last one, the longer")
    ]


class ClusterStatus(_Response, kw_only=True):
    """This node's view of the cluster and of every Raft group it serves."""

    node: int
    release: Annotated[str, Meta(description="the release this node runs")] | UnsetType = UNSET
    protocol: ProtocolRange | UnsetType = UNSET
    queues: int
    placement: (
        Annotated[dict[str, int], Meta(description="queue name -> data group")] | UnsetType
    ) = UNSET
    nodes: (
        Annotated[
            dict[str, NodeInfo],
            Meta(description="the catalog's nodes: id -> peer address and data directories"),
        ]
        | UnsetType
    ) = UNSET
    data_groups: (
        Annotated[
            dict[str, DataGroupInfo],
            Meta(description="the catalog's data groups: replicas, data dir per replica"),
        ]
        | UnsetType
    ) = UNSET
    groups: dict[str, GroupStatus]
    clock: ClockStatus | UnsetType = UNSET
    repair: RepairStatus | UnsetType = UNSET
    scrub: ScrubStatus | UnsetType = UNSET
    disks: (
        Annotated[list[DiskStatus], Meta(description="each data directory's health, in order")]
        | UnsetType
    ) = UNSET
    peer_tls: (
        Annotated[
            bool,
            Meta(description="peer (Raft) connections are mutual TLS (cmq serve --peer-tls-*)"),
        ]
        | UnsetType
    ) = UNSET


class GroupDigestResponse(_Response):
    """A data group's replicated state on the answering node, hashed: replicas that applied
    the same index show the same hashes (a read-only check; nothing is forwarded)."""

    group: int
    node: int
    applied: Annotated[int, Meta(description="the Raft index the hashes were taken at")]
    image_sha256: Annotated[str, Meta(description="SHA-256 of the state machine's image")]
    image_bytes: int
    segments_sha256: Annotated[
        str, Meta(description="SHA-256 of the segment files the image lists, to their sizes")
    ]
    segments: Annotated[int, Meta(description="how many segment files were hashed")]
