"""The catalog: the meta group's replicated state machine (`meta`: queues, nodes, placements,
keys, feature flags), the placement policy (`placement`) and access keys with their sealed
secrets (`keys`). Pure: the operator actions that change it are `cmq.admin`."""

META_GROUP = 0
"""The catalog's Raft group; data groups are numbered from 1."""

__all__ = ["META_GROUP"]
