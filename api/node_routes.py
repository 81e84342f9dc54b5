"""The node administration routes (``/v1/nodes``: list, join, drain, activate, remove;
``/v1/cluster/groups``: grow the number of data groups), added to `api.routes.ROUTES`. Thin
handlers over `QueueService`'s node methods (`cmq.admin.nodes_admin`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from api.models import EmptyRequest
from api.node_models import (
    EnableFeaturesRequest,
    FeatureList,
    FeatureRow,
    FeaturesEnabled,
    GroupsChanged,
    JoinNodeRequest,
    JoinNodeResponse,
    NodeChanged,
    NodeList,
    NodeRow,
    SetGroupsRequest,
)
from api.routing import SERVICE_ERRORS, Context, Reply, Response, Route
from cmq.errors import CmqError, FeatureUnsupported, InvalidParameter, NodeBusy, NodeNotFound
from cmq.service import QueueService


def _node_in_path(ctx: Context) -> int:
    """The node id of ``/v1/nodes/{node}[/...]``; `InvalidParameter` when it is not one."""
    part = ctx.path.split("/")[3] if ctx.path.count("/") >= 3 else ""
    if not part.isdigit() or int(part) < 1 or len(part) > 18:
        raise InvalidParameter(f"{part!r} is not a node id (a positive integer)")
    return int(part)


async def list_nodes(ctx: Context, _: None) -> Reply:
    rows = await ctx.service.list_nodes()
    return Reply(NodeList([NodeRow(**r) for r in rows]))


async def join_node(ctx: Context, req: JoinNodeRequest) -> Reply:
    peers = await ctx.service.join_node(
        req.id, req.address, req.http, tuple(req.data_dirs), req.zone
    )
    return Reply(JoinNodeResponse({str(n): a for n, a in peers.items()}))


async def set_groups(ctx: Context, req: SetGroupsRequest) -> Reply:
    added = await ctx.service.set_groups(req.groups)
    return Reply(GroupsChanged(req.groups, list(added)))


async def list_features(ctx: Context, _: None) -> Reply:
    rows = await ctx.service.list_features()
    return Reply(FeatureList([FeatureRow(**r) for r in rows]))


async def enable_features(ctx: Context, req: EnableFeaturesRequest) -> Reply:
    return Reply(FeaturesEnabled(await ctx.service.enable_features(req.names)))


def _node_change(
    method: str,
    path: str,
    operation_id: str,
    summary: str,
    *,
    call: Callable[[QueueService], Callable[[int], Awaitable[None]]],
    state: Literal["active", "draining", "removed"],
    answer: str,
    raises: tuple[type[CmqError], ...] = (),
) -> Route:
    """A route that changes the state of the node its path names (``/v1/nodes/{node}[/...]``):
    an optional empty body, ``call`` of the service on the node id, answered with the node and
    its new ``state`` (``answer``: the response's description); it raises ``NodeNotFound`` and
    ``raises`` beyond the service errors."""

    async def change(ctx: Context, _: EmptyRequest) -> Reply:
        node = _node_in_path(ctx)
        await call(ctx.service)(node)
        return Reply(NodeChanged(node, state))

    return Route(
        method,
        path,
        operation_id,
        summary,
        change,
        (Response(200, answer, NodeChanged),),
        request=EmptyRequest,
        request_required=False,
        raises=(*SERVICE_ERRORS, NodeNotFound, *raises),
    )


_N = "/v1/nodes/{node}"
NODE_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/nodes",
        "listNodes",
        "Every registered node: zone, state, replicas, moves, leaders, lag",
        list_nodes,
        (Response(200, "Nodes", NodeList),),
        raises=SERVICE_ERRORS,
    ),
    Route(
        "POST",
        "/v1/nodes",
        "joinNode",
        "Register a node joining the cluster (cmq serve --join); idempotent",
        join_node,
        (Response(200, "Registered; every node's peer address", JoinNodeResponse),),
        request=JoinNodeRequest,
        raises=SERVICE_ERRORS,
    ),
    _node_change(
        "POST",
        f"{_N}/drain",
        "drainNode",
        "Move every replica and leadership off a node (asynchronous: watch listNodes)",
        call=lambda service: service.drain_node,
        state="draining",
        answer="Draining",
        raises=(NodeBusy,),
    ),
    _node_change(
        "POST",
        f"{_N}/activate",
        "activateNode",
        "Undo a drain: the node takes replicas again",
        call=lambda service: service.activate_node,
        state="active",
        answer="Active",
    ),
    _node_change(
        "DELETE",
        _N,
        "removeNode",
        "Forget a node; refused (NodeBusy) while it holds replicas or votes in the catalog",
        call=lambda service: service.remove_node,
        state="removed",
        answer="Removed",
        raises=(NodeBusy,),
    ),
)
"""The node administration routes (added to `ROUTES`)."""

CLUSTER_ROUTES: tuple[Route, ...] = (
    Route(
        "PUT",
        "/v1/cluster/groups",
        "setGroups",
        "Grow the number of data groups (new queues go to the least-loaded group; existing "
        "queues stay); fewer groups than today is refused (InvalidParameter)",
        set_groups,
        (Response(200, "The number of data groups and the ids added", GroupsChanged),),
        request=SetGroupsRequest,
        raises=SERVICE_ERRORS,
    ),
    Route(
        "GET",
        "/v1/cluster/features",
        "listFeatures",
        "The feature flags: enabled or not, and which registered nodes support each (asked live)",
        list_features,
        (Response(200, "Feature flags", FeatureList),),
        raises=SERVICE_ERRORS,
    ),
    Route(
        "POST",
        "/v1/cluster/features",
        "enableFeatures",
        "Enable feature flags once every registered node supports them (FeatureUnsupported "
        "names a node that does not); idempotent; flags are never disabled",
        enable_features,
        (Response(200, "The flags this call enabled", FeaturesEnabled),),
        request=EnableFeaturesRequest,
        request_required=False,
        raises=(*SERVICE_ERRORS, FeatureUnsupported),
    ),
)
"""Cluster-wide administration (added to `ROUTES`)."""
