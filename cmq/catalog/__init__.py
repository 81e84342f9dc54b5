"""The catalog: the meta group's replicated state machine (`meta`: queues, nodes, placements,
keys, feature flags), the placement policy (`placement`), access keys and grants (`keys`) and
the operator actions that change them (`key_admin`, `nodes_admin`)."""
