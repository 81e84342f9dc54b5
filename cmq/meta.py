"""The catalog: the meta group's (group 0) state machine. Pure and deterministic.

It records the nodes (each registers its peer address and data directories when it starts),
the data groups (their replicas and, per replica, the data directory they are bound to), and
which data group holds each queue. Every node applies the meta group, so any node can
route a request without asking anyone. Writes are rare (queue creation and deletion), so commands
and snapshots are JSON (orjson).

Placement: `AssignQueue` picks, *inside apply*, the data group holding the fewest queues (ties:
the lowest id), so every replica agrees without the proposer having to be right about load.
Assigning an existing name returns the existing assignment (idempotent, resumable creation).

Each placed queue may carry metadata: string keys to string values that the catalog stores but
never interprets (the SQS surface keeps tags, timestamps and its own attributes there). Removing
a queue forgets its metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from cmq.errors import InvariantBroken


@dataclass(frozen=True, slots=True)
class Assignment:
    """A queue's placement."""

    name: str
    group: int


class CatalogMachine:
    """Queue name → data group. Implements raftlog's `StateMachine`."""

    __slots__ = ("data_groups", "meta", "nodes", "queues")

    def __init__(self, data_groups: tuple[int, ...]) -> None:
        if not data_groups:
            raise ValueError("at least one data group is required")
        self.data_groups = tuple(sorted(data_groups))
        self.queues: dict[str, int] = {}
        self.meta: dict[str, dict[str, str]] = {}
        # node id -> {"address": "host:port", "data_dirs": [...]}
        self.nodes: dict[int, dict[str, Any]] = {}

    # -- commands ---------------------------------------------------------------------------------
    @staticmethod
    def assign(name: str) -> bytes:
        """Command: place ``name`` (idempotent). Result: its `Assignment`."""
        return orjson.dumps({"op": "assign", "name": name})

    @staticmethod
    def register_node(node: int, address: str, data_dirs: list[str]) -> bytes:
        """Command: record a node's peer address and data directories (idempotent)."""
        return orjson.dumps(
            {"op": "node", "name": str(node), "address": address, "data_dirs": data_dirs}
        )

    @staticmethod
    def remove(name: str) -> bytes:
        """Command: forget ``name``. Result: True if it was known."""
        return orjson.dumps({"op": "remove", "name": name})

    @staticmethod
    def update_meta(name: str, changes: dict[str, str], unset: list[str]) -> bytes:
        """Command: set ``changes`` and remove the keys ``unset`` in the metadata of ``name``.
        Result: the metadata after the change, or None when ``name`` is not placed."""
        return orjson.dumps({"op": "meta", "name": name, "set": changes, "unset": unset})

    def apply(self, index: int, command: bytes) -> object:
        try:
            cmd = orjson.loads(command)
            op, name = cmd["op"], cmd["name"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as e:
            raise InvariantBroken(f"undecodable catalog command at {index}: {e}") from None
        if op == "assign":
            group = self.queues.get(name)
            if group is None:
                group = self._least_loaded()
                self.queues[name] = group
            return Assignment(name, group)
        if op == "remove":
            self.meta.pop(name, None)
            return self.queues.pop(name, None) is not None
        if op == "meta":
            if name not in self.queues:
                return None
            meta = self.meta.setdefault(name, {})
            meta.update({str(k): str(v) for k, v in cmd["set"].items()})
            for key in cmd["unset"]:
                meta.pop(str(key), None)
            if not meta:
                del self.meta[name]
            return dict(meta)
        if op == "node":
            self.nodes[int(name)] = {"address": cmd["address"], "data_dirs": cmd["data_dirs"]}
            return True
        raise InvariantBroken(f"unknown catalog command {op!r} at {index}")

    def _least_loaded(self) -> int:
        load = dict.fromkeys(self.data_groups, 0)
        for g in self.queues.values():
            if g in load:
                load[g] += 1
        return min(self.data_groups, key=lambda g: (load[g], g))

    # -- reads ------------------------------------------------------------------------------------
    def group_of(self, name: str) -> int | None:
        return self.queues.get(name)

    def names(self) -> list[str]:
        return sorted(self.queues)

    def meta_of(self, name: str) -> dict[str, str] | None:
        """The metadata of ``name`` (a copy; empty when none), None when it is not placed."""
        if name not in self.queues:
            return None
        return dict(self.meta.get(name, {}))

    def node_info(self, node: int) -> dict[str, Any] | None:
        return self.nodes.get(node)

    def groups(self) -> dict[int, dict[str, Any]]:
        """Every data group: its replicas (every registered node hosts every group) and, per
        replica, the data directory it is bound to (group id modulo the node's directories)."""
        out: dict[int, dict[str, Any]] = {}
        for g in self.data_groups:
            dirs = {
                n: info["data_dirs"][g % len(info["data_dirs"])]
                for n, info in sorted(self.nodes.items())
                if info["data_dirs"]
            }
            out[g] = {
                "replicas": sorted(self.nodes),
                "data_dirs": dirs,
                "queues": sum(1 for q in self.queues.values() if q == g),
            }
        return out

    # -- snapshots --------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        image: dict[str, Any] = {
            "queues": self.queues,
            "nodes": {str(n): i for n, i in self.nodes.items()},
        }
        if self.meta:  # absent when empty: images without metadata keep their old bytes
            image["meta"] = self.meta
        return orjson.dumps(image, option=orjson.OPT_SORT_KEYS)

    def restore(self, index: int, data: bytes) -> None:
        if not data:
            self.queues = {}
            self.nodes = {}
            self.meta = {}
            return
        try:
            image = orjson.loads(data)
            self.queues = {str(k): int(v) for k, v in image["queues"].items()}
            self.nodes = {int(k): dict(v) for k, v in image.get("nodes", {}).items()}
            self.meta = {
                str(q): {str(k): str(v) for k, v in m.items()}
                for q, m in image.get("meta", {}).items()
            }
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise InvariantBroken(f"undecodable catalog snapshot at {index}: {e}") from None
