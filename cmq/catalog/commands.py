"""The catalog's commands: the JSON bytes a node proposes to the meta group
(`cmq.catalog.meta.CatalogMachine` applies them; their results are documented here).

Each command is a JSON object with its ``op`` (the version marker: an op a release does not know
stops the group with `NewerFormat`) and a ``name`` (a queue, a node or a group id as text, or
empty), then the fields of that op. The access keys' ``key.*`` commands are `cmq.catalog.keys`'.
"""

from __future__ import annotations

import orjson

from cmq.upgrade import features as feature_flags


def assign(name: str) -> bytes:
    """Command: place ``name`` (idempotent). Result: its `Assignment`."""
    return orjson.dumps({"op": "assign", "name": name})


def remove(name: str) -> bytes:
    """Command: forget ``name``. Result: True if it was known."""
    return orjson.dumps({"op": "remove", "name": name})


def register_node(
    node: int,
    address: str,
    data_dirs: list[str] | tuple[str, ...],
    zone: str = "",
    http: str = "",
) -> bytes:
    """Command: record a node (idempotent; keeps its state). Result: True."""
    return orjson.dumps(
        {
            "op": "node",
            "name": str(node),
            "address": address,
            "data_dirs": list(data_dirs),
            "zone": zone,
            "http": http,
        }
    )


def init(groups: int, replication: int, founders: list[int]) -> bytes:
    """Command: found ``groups`` data groups (ids 1..groups) with ``replication`` replicas
    each, once every one of ``founders`` registered, enabling every feature flag this
    release knows (a cluster forms on one release). Result: True when initialized (now or
    before), `Refused` while a founder is missing."""
    return orjson.dumps(
        {
            "op": "init",
            "name": "",
            "groups": groups,
            "replication": replication,
            "founders": founders,
            "features": sorted(feature_flags.KNOWN),
        }
    )


def enable_feature(name: str) -> bytes:
    """Command: enable feature flag ``name`` (idempotent). Result: True if it was not yet
    enabled. The proposer first checks every registered node supports it."""
    return orjson.dumps({"op": "feature", "name": name})


def drain(node: int) -> bytes:
    """Command: move every replica off ``node``. Result: True or `Refused`."""
    return orjson.dumps({"op": "drain", "name": str(node)})


def activate(node: int) -> bytes:
    """Command: a draining ``node`` takes replicas again. Result: True or `Refused`."""
    return orjson.dumps({"op": "activate", "name": str(node)})


def forget(node: int) -> bytes:
    """Command: forget ``node`` (it must hold no replica). Result: True or `Refused`."""
    return orjson.dumps({"op": "forget", "name": str(node)})


def moved(group: int, add: int, remove: int) -> bytes:
    """Command: ``group``'s move (add, remove) completed. Result: True if it was the move in
    flight (False: already recorded or another move)."""
    return orjson.dumps({"op": "moved", "name": str(group), "add": add, "remove": remove})


def set_groups(groups: int) -> bytes:
    """Command: grow the number of data groups to ``groups``. Result: the ids of the groups
    added (empty when there were that many already), or `Refused` (fewer than today, over
    `MAX_DATA_GROUPS`, or not initialized)."""
    return orjson.dumps({"op": "groups", "name": "", "groups": groups})


def hosts(node: int) -> bytes:
    """Command (a read through the log, so linearizable): the data groups ``node`` should
    run a replica of. Result: a list of group ids."""
    return orjson.dumps({"op": "hosts", "name": str(node)})


def update_meta(name: str, changes: dict[str, str], unset: list[str]) -> bytes:
    """Command: set ``changes`` and remove the keys ``unset`` in the metadata of ``name``.
    Result: the metadata after the change, or None when ``name`` is not placed."""
    return orjson.dumps({"op": "meta", "name": name, "set": changes, "unset": unset})


__all__ = [
    "activate",
    "assign",
    "drain",
    "enable_feature",
    "forget",
    "hosts",
    "init",
    "moved",
    "register_node",
    "remove",
    "set_groups",
    "update_meta",
]
