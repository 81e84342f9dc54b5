"""Operator actions: access keys (`key_admin`), nodes joining, draining and leaving
(`nodes_admin`), feature flags (`feature_admin`) and catalog backup and restore
(`backup_admin`). Each checks its request, then proposes catalog commands through the router.
Beside them, `peer_releases` asks every node which release it runs (for `/v1/status` and
before a flag is enabled)."""
