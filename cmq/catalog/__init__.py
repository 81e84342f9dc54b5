"""The catalog: the meta group's replicated state machine (`meta`: queues, nodes, placements,
keys, feature flags), the placement policy (`placement`) and access keys with their sealed
secrets (`keys`). Pure: the operator actions that change it are `cmq.admin`."""
