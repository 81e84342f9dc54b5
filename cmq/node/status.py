"""A node's view of the cluster, as ``/v1/status`` renders it (`QueueService.status`)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from cmq.catalog.meta import CatalogMachine
from cmq.errors import GroupNotFound, InvariantBroken, Unavailable
from cmq.fsm.machine import QueueMachine
from cmq.model import GroupDigest
from cmq.upgrade.release import describe
from raftlog.runtime import MultiRaft, Offload


def render_status(
    node_id: int,
    raft: MultiRaft,
    catalog: CatalogMachine,
    groups: tuple[int, ...],
    releases: Mapping[int, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """This node's release and peer protocol range (`cmq.upgrade.release.describe`); role, term,
    leader, commit/applied, voters and follower lag of each of ``groups`` (lag is known on a group's
    leader), plus the catalog: placement, nodes and data groups. ``releases``: what each node
    reported of its release (`cmq.admin.peer_releases.PeerReleases.releases`), added to its entry
    in ``nodes`` (a node without one is unknown: no answer yet)."""
    releases = releases or {}
    views = {}
    for g in groups:
        st = raft.status(g)
        views[str(g)] = {
            "role": st.role.name.lower(),
            "recovering": st.recovering,
            "term": st.term,
            "leader": st.leader,
            "commit": st.commit,
            "applied": st.applied,
            "last_index": st.last_index,
            "voters": list(st.conf.voters),
            "lag": {str(p): st.last_index - ps.match for p, ps in st.peers.items() if p != node_id},
            "stopped": _stopped(raft, g),
        }
    placement = {name: catalog.group_of(name) for name in catalog.names()}
    return {
        "node": node_id,
        **describe(),
        "groups": views,
        "queues": len(placement),
        "placement": placement,
        "nodes": {
            str(n): {
                "address": i.address,
                "http": i.http,
                "data_dirs": list(i.data_dirs),
                "zone": i.zone,
                "state": i.state,
            }
            | dict(releases.get(n, {}))
            for n, i in sorted(catalog.nodes.items())
        },
        "data_groups": {
            str(g): info | {"data_dirs": {str(n): d for n, d in info["data_dirs"].items()}}
            for g, info in catalog.groups().items()
        },
    }


def _stopped(raft: MultiRaft, group: int) -> str | None:
    """Why ``group`` stopped here (a halt: a broken invariant, a failed disk), or None."""
    driver = raft.groups.get(group)
    exc = driver.stopped if driver is not None else None
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def describe_repairs(raft: MultiRaft) -> dict[str, Any]:
    """The repairs of this node's damaged replicas as ``/v1/status`` shows them (``repair``):
    whether they are on, the groups under repair with what was found, and the counts."""
    rs = raft.repairs.stats()
    return {
        "enabled": raft.repairs.enabled,
        "under_repair": {str(g): reason for g, reason in rs.under_repair},
        "started": rs.started,
        "completed": rs.completed,
    }


async def group_digest(
    node_id: int,
    raft: MultiRaft,
    machines: Mapping[int, QueueMachine],
    group: int,
    offload: Offload = asyncio.to_thread,
) -> GroupDigest:
    """Hashes of data group ``group``'s state on this node (`GroupDigest`). The applied index
    and the image are read together on the event loop (the image is cached per queue, so this
    is cheap); the segment files are read and hashed through ``offload`` (a worker thread in
    production), up to the sizes the image records (later appends do not change the result).
    `GroupNotFound` when no replica of a data group ``group`` is open here; `Unavailable` when
    a listed segment went away while it was read (retry)."""
    machine = machines.get(group)
    if machine is None or group not in raft.groups:
        raise GroupNotFound(f"node {node_id} hosts no replica of data group {group}")
    applied = raft.status(group).applied
    image = machine.encode_image()
    try:
        segments, count = await offload(machine.segments_digest, image)
    except (InvariantBroken, OSError) as e:
        raise Unavailable(f"group {group} changed while its segments were read: {e}") from None
    return GroupDigest(
        group=group,
        node=node_id,
        applied=applied,
        image_sha256=hashlib.sha256(image).hexdigest(),
        image_bytes=len(image),
        segments_sha256=segments,
        segments=count,
    )
