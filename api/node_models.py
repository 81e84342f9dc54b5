"""The typed bodies of the node administration routes (``/v1/nodes``: join, list, drain,
activate, remove): msgspec `Struct`s like those of `api.models`, whose rules they follow. Pure:
no aiohttp, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from api.models import _Request, _Response


class JoinNodeRequest(_Request):
    """A node registering itself (``cmq serve --join``)."""

    id: Annotated[int, Meta(ge=1, description="the node's id (a positive integer)")]
    address: Annotated[str, Meta(min_length=3, max_length=300, description="peer host:port")]
    data_dirs: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(min_length=1)]
    http: Annotated[str, Meta(max_length=300, description="HTTP host:port")] = ""
    zone: Annotated[str, Meta(max_length=64, description="failure-domain label")] = ""


class JoinNodeResponse(_Response):
    peers: Annotated[dict[str, str], Meta(description="node id -> peer host:port")]


class NodeRow(_Response):
    id: int
    address: str
    http: str
    zone: str
    state: Literal["active", "draining"]
    replicas: Annotated[list[int], Meta(description="data groups it is a voter of")]
    incoming: Annotated[list[int], Meta(description="data groups a move is adding it to")]
    leaders: Annotated[list[int], Meta(description="groups it leads (0: the catalog), as known")]
    meta: Annotated[str, Meta(description='its role in the catalog group: "voter", "learner"')]
    lag: Annotated[int, Meta(description="entries behind, as the answering node's groups see")]


class NodeList(_Response):
    nodes: list[NodeRow]


class SetGroupsRequest(_Request):
    """Grow the number of data groups (``cmq cluster set-groups N``)."""

    groups: Annotated[int, Meta(ge=1, le=10_000, description="the number of data groups wanted")]


class GroupsChanged(_Response):
    groups: Annotated[int, Meta(description="the number of data groups now")]
    added: Annotated[list[int], Meta(description="ids of the data groups this call added")]


class NodeChanged(_Response):
    node: int
    state: Literal["active", "draining", "removed"]


class FeatureRow(_Response):
    name: Annotated[str, Meta(description="the flag's stable name")]
    since: Annotated[str, Meta(description="the release that introduced it ('' if unknown here)")]
    description: Annotated[str, Meta(description="what it lets a node write")]
    enabled: Annotated[bool, Meta(description="enabled in the catalog (never disabled again)")]
    supported_by: Annotated[list[int], Meta(description="nodes whose release supports it")]
    missing: Annotated[
        list[int], Meta(description="registered nodes without it, or that did not answer")
    ]


class FeatureList(_Response):
    features: list[FeatureRow]


class EnableFeaturesRequest(_Request):
    """Enable feature flags (``cmq cluster enable-feature NAME|--all``)."""

    names: Annotated[
        list[str] | None,
        Meta(description="the flags to enable; absent or null: every flag this release knows"),
    ] = None


class FeaturesEnabled(_Response):
    enabled: Annotated[list[str], Meta(description="the flags this call enabled (in order)")]
