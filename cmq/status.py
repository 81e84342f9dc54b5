"""A node's view of the cluster, as ``/v1/status`` renders it (`QueueService.status`)."""

from __future__ import annotations

from typing import Any

from cmq.meta import CatalogMachine
from raftlog.runtime import MultiRaft


def render_status(
    node_id: int, raft: MultiRaft, catalog: CatalogMachine, groups: tuple[int, ...]
) -> dict[str, Any]:
    """Role, term, leader, commit/applied, voters and follower lag of each of ``groups`` (lag
    is known on a group's leader), plus the catalog: placement, nodes and data groups."""
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
        }
    placement = {name: catalog.group_of(name) for name in catalog.names()}
    return {
        "node": node_id,
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
            for n, i in sorted(catalog.nodes.items())
        },
        "data_groups": {
            str(g): info | {"data_dirs": {str(n): d for n, d in info["data_dirs"].items()}}
            for g, info in catalog.groups().items()
        },
    }
