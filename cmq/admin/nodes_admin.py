"""`NodesAdmin`: the node administration behind ``/v1/nodes`` and ``cmq node ...``.

* `join`: a starting node registers through any running node (``cmq serve --join URL``); the
  answer names every registered node's peer address so the new node can dial them, while they
  learn of it from the catalog (`cmq.node.membership`).
* `drain`: the catalog marks the node draining and plans its replicas away; the meta group's
  leader replaces it as a meta voter; leaderships move with the replicas.
* `activate`: undo a drain (the node takes replicas again);
* `remove`: forget a node that holds no replica and is no meta voter (`NodeBusy` otherwise,
  `NodeNotFound` for an unknown id).
* `set_groups`: grow the number of data groups (``cmq cluster set-groups N``; the catalog places
  the new ones, `cmq.catalog.meta`); shrinking is refused (`InvalidParameter`).
* `list`: every registered node with zone, state, replicas, the moves involving it, the groups
  this node knows it leads, and the replication lag this node sees as a leader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cmq.catalog import META_GROUP
from cmq.catalog.meta import CatalogMachine
from cmq.errors import InvalidParameter, NodeBusy, NodeNotFound
from cmq.routing.router import Router
from cmq.routing.rpc import CatalogCall
from raftlog.runtime import MultiRaft
from raftlog.transport import Address


@dataclass(frozen=True, slots=True)
class NodeView:
    """One row of `NodesAdmin.list`."""

    id: int
    address: str
    http: str
    zone: str
    state: str
    replicas: tuple[int, ...]
    """Data groups whose voters include the node (moves done)."""
    incoming: tuple[int, ...]
    """Data groups a move in flight is adding the node to."""
    leaders: tuple[int, ...]
    """Groups (0: the catalog) led by the node, as far as the answering node knows."""
    meta: str
    """The node's role in the meta group: "voter", "learner" or "" (not yet a member)."""
    lag: int
    """Largest replication lag (entries) of the node behind the groups the answering node
    leads; 0 when unknown."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "address": self.address,
            "http": self.http,
            "zone": self.zone,
            "state": self.state,
            "replicas": list(self.replicas),
            "incoming": list(self.incoming),
            "leaders": list(self.leaders),
            "meta": self.meta,
            "lag": self.lag,
        }


class NodesAdmin:
    """Node administration on one node (see the module docstring)."""

    def __init__(self, node_id: int, raft: MultiRaft, catalog: CatalogMachine, router: Router):
        self._id = node_id
        self._raft = raft
        self._catalog = catalog
        self._router = router

    async def join(
        self, node: int, address: str, http: str, data_dirs: tuple[str, ...], zone: str
    ) -> dict[int, str]:
        """Register ``node`` (idempotent); every registered node's peer address by id."""
        if node <= 0:
            raise InvalidParameter("a node id is a positive integer")
        try:
            Address.parse(address)
        except ValueError as e:
            raise InvalidParameter(f"bad peer address {address!r}: {e}") from None
        if not data_dirs:
            raise InvalidParameter("a node needs at least one data directory")
        cmd = CatalogMachine.register_node(node, address, data_dirs, zone=zone, http=http)
        await self._router.run(CatalogCall(META_GROUP, cmd))
        peers = {n: i.address for n, i in self._catalog.nodes.items()}
        peers[node] = address
        return dict(sorted(peers.items()))

    async def drain(self, node: int) -> None:
        """Move every replica and leadership off ``node`` (asynchronously: watch `list`)."""
        await self._router.run(CatalogCall(META_GROUP, CatalogMachine.drain(node)))

    async def activate(self, node: int) -> None:
        """Undo a drain: ``node`` takes replicas again (moves planned back onto it)."""
        await self._router.run(CatalogCall(META_GROUP, CatalogMachine.activate(node)))

    async def remove(self, node: int) -> None:
        """Forget ``node``; refused while it holds replicas or votes in the meta group."""
        if node not in self._catalog.nodes:
            raise NodeNotFound(f"node {node} is not registered")
        if node in self._raft.status(META_GROUP).conf.voters:
            raise NodeBusy(f"node {node} is a voter of the catalog group: drain it first")
        await self._router.run(CatalogCall(META_GROUP, CatalogMachine.forget(node)))

    async def set_groups(self, groups: int) -> tuple[int, ...]:
        """Grow the cluster to ``groups`` data groups; the ids added (empty: already so many).
        The new groups open on their replicas at the next membership round."""
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise InvalidParameter("the number of data groups is a positive integer")
        res = await self._router.run(CatalogCall(META_GROUP, CatalogMachine.set_groups(groups)))
        return tuple(int(g) for g in res)

    def list(self) -> list[NodeView]:
        """Every registered node as this node sees it."""
        conf = self._raft.status(META_GROUP).conf
        leaders: dict[int, list[int]] = {}
        lag: dict[int, int] = {}
        for g in sorted(self._raft.groups):
            st = self._raft.status(g)
            if st.leader:
                leaders.setdefault(st.leader, []).append(g)
            if st.leader == self._id:
                for p, ps in st.peers.items():
                    lag[p] = max(lag.get(p, 0), st.last_index - ps.match)
        rows = []
        for n, info in sorted(self._catalog.nodes.items()):
            placements = self._catalog.placements.items()
            rows.append(
                NodeView(
                    id=n,
                    address=info.address,
                    http=info.http,
                    zone=info.zone,
                    state=info.state,
                    replicas=tuple(g for g, p in sorted(placements) if n in p.replicas),
                    incoming=tuple(
                        g for g, p in sorted(placements) if p.move is not None and p.move.add == n
                    ),
                    leaders=tuple(leaders.get(n, ())),
                    meta="voter" if n in conf.voters else "learner" if n in conf.learners else "",
                    lag=lag.get(n, 0),
                )
            )
        return rows
