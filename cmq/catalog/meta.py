"""The catalog: the meta group's (group 0) state machine. Pure and deterministic.

It records the nodes (each registers its peer and HTTP addresses, data directories and zone),
the data groups (their replicas, founding voters and the replica move in flight,
`cmq.catalog.placement`), and which data group holds each queue. Every node applies the meta group
(as a voter or a learner), so any node can route a request without asking anyone. Writes are rare
(queue creation and deletion, nodes joining and leaving, move steps), so commands and snapshots are
JSON: the commands' bytes are `cmq.catalog.commands`', the snapshot's `cmq.catalog.image`'.

Versions: a command's ``op`` is its version marker (an op this release does not know, ``key.*``
included, is a newer release's: the group stops with `NewerFormat` naming the entry, the op and
this release, never skipping it); the image carries ``version`` (`CATALOG_IMAGE_VERSION`),
read before anything else so that a newer image is refused by its version with both named, not
by the fields it adds.

Placement is decided *inside apply* (`cmq.catalog.placement`), so every replica agrees without the
proposer having to be right:

* ``init`` (proposed by a founding node once every founder registered) fixes the number of data
  groups, the replication factor R and places each group on R nodes;
* ``node`` registers or updates a node; a new node makes the catalog plan moves onto it;
* ``drain`` marks a node draining: its replicas are planned away (``activate`` undoes it);
* ``forget`` removes a node that holds no replica (refused otherwise);
* ``moved`` is the report of a group's leader that a move completed: the replicas become the
  move's goal and further moves are planned;
* ``groups`` grows the number of data groups (``cmq cluster set-groups N``): the new groups
  (ids after the highest) are placed on the active nodes like the founding ones, balanced with
  the existing groups, and bootstrapped by their founding replicas. Existing queues stay where
  they are; new queues go to the least-loaded group, so first to the new ones. Shrinking is
  refused (queues would have to move between groups).

`AssignQueue` picks the data group holding the fewest queues (ties: the lowest id); assigning an
existing name returns the existing assignment (idempotent, resumable creation).

Feature flags (`cmq.upgrade.features`): ``feature`` enables one (idempotent; the proposer checked
that every registered node supports it); ``init`` enables those the founding release knows. A flag
this release does not know cannot be applied: that is `InvariantBroken`, never a silent skip.

Each placed queue may carry metadata: string keys to string values that the catalog stores but
never interprets (the SQS surface keeps tags, timestamps and its own attributes there). Removing
a queue forgets its metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from cmq.catalog import commands
from cmq.catalog.image import CATALOG_IMAGE_VERSION, CatalogImage, decode_image, encode_image
from cmq.catalog.keys import KeyRefused, KeyStore
from cmq.catalog.placement import (
    ACTIVE,
    DRAINING,
    GroupPlacement,
    Move,
    NodeInfo,
    pick_dir,
    place_groups,
    plan_moves,
    preferred_leaders,
)
from cmq.errors import InvariantBroken, NewerFormat, NewerLayout
from cmq.upgrade import features as feature_flags
from cmq.upgrade.release import RELEASE

MAX_MOVES = 2
"""Replica moves in flight at once in the whole cluster."""

MAX_DATA_GROUPS = 10_000
"""Most data groups a cluster may have (``init`` and ``groups``)."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """A queue's placement."""

    name: str
    group: int


@dataclass(frozen=True, slots=True)
class Refused:
    """A catalog command refused (nothing changed): a `cmq.errors` code and why."""

    code: str
    message: str


class CatalogMachine:
    """Nodes, data groups and queue placement. Implements raftlog's `StateMachine`."""

    __slots__ = (
        "_hosted",
        "_load",
        "_moving",
        "_preferred",
        "features",
        "founders",
        "keys",
        "meta",
        "nodes",
        "placements",
        "queues",
        "replication",
    )

    def __init__(self) -> None:
        self.queues: dict[str, int] = {}
        self.nodes: dict[int, NodeInfo] = {}
        self.meta: dict[str, dict[str, str]] = {}
        self.placements: dict[int, GroupPlacement] = {}
        self.replication = 0
        """R; 0 until ``init`` is applied."""
        self.founders: tuple[int, ...] = ()
        self._load: dict[int, int] = {}
        """Data group -> queues placed on it (derived from ``queues``)."""
        self.keys = KeyStore()
        """The access keys (`cmq.catalog.keys`: their ``key.*`` commands are applied there)."""
        self.features: dict[str, int] = {}
        """Enabled feature flags -> the catalog index that enabled them (`cmq.upgrade.features`)."""
        self._hosted: dict[int, tuple[int, ...]] = {}
        self._preferred: dict[int, int] | None = None
        self._moving: tuple[int, ...] | None = None
        """Memos of `hosted_by`, `preferred_leaders` and `moving` (asked every membership
        round on every node): dropped by every `apply` and `restore`, the only ways
        placements and nodes change."""

    # -- commands (`cmq.catalog.commands`) --------------------------------------------------------
    assign = staticmethod(commands.assign)
    remove = staticmethod(commands.remove)
    register_node = staticmethod(commands.register_node)
    init = staticmethod(commands.init)
    enable_feature = staticmethod(commands.enable_feature)
    drain = staticmethod(commands.drain)
    activate = staticmethod(commands.activate)
    forget = staticmethod(commands.forget)
    moved = staticmethod(commands.moved)
    set_groups = staticmethod(commands.set_groups)
    hosts = staticmethod(commands.hosts)
    update_meta = staticmethod(commands.update_meta)

    def feature_enabled(self, name: str) -> bool:
        """Whether flag ``name`` is enabled in this catalog (as applied here)."""
        return name in self.features

    def apply(self, index: int, command: bytes) -> object:
        self._hosted.clear()
        self._preferred = self._moving = None
        try:
            cmd = orjson.loads(command)
            op, name = cmd["op"], cmd["name"]
            return self._apply(op, name, cmd, index)
        except NewerLayout as e:
            raise NewerFormat(
                f"catalog entry {index}: {e} (release {RELEASE} does not know it)"
            ) from None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise InvariantBroken(f"undecodable catalog command at {index}: {e}") from None

    def _apply(self, op: str, name: str, cmd: dict[str, Any], index: int) -> object:
        if op.startswith("key."):
            res = self.keys.apply(op, name, cmd)
            if isinstance(res, KeyRefused):
                return Refused(res.code, res.message)
            return msgspec.to_builtins(res)
        if op == "assign":
            group = self.queues.get(name)
            if group is None:
                if not self.placements:
                    return Refused("Unavailable", "the cluster is not initialized yet")
                group = self._least_loaded()
                self.queues[name] = group
                self._load[group] = self._load.get(group, 0) + 1
            return Assignment(name, group)
        if op == "remove":
            self.meta.pop(name, None)
            gone = self.queues.pop(name, None)
            if gone is not None:
                self._load[gone] -= 1
            return gone is not None
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
            node = int(name)
            old = self.nodes.get(node)
            self.nodes[node] = NodeInfo(
                address=str(cmd["address"]),
                data_dirs=tuple(str(d) for d in cmd["data_dirs"]),
                zone=str(cmd.get("zone", "")),
                http=str(cmd.get("http", "")),
                state=old.state if old is not None else ACTIVE,
            )
            if old is None:
                self._plan()
            return True
        if op == "init":
            fresh = not self.placements
            res = self._init(int(cmd["groups"]), int(cmd["replication"]), cmd["founders"])
            if fresh and self.placements:  # formed now: by one release, every flag it knows
                for flag in cmd.get("features", ()):
                    self._enable(str(flag), index)
            return res
        if op == "feature":
            return self._enable(name, index)
        if op == "drain":
            return self._drain(int(name))
        if op == "activate":
            info = self.nodes.get(int(name))
            if info is None:
                return Refused("NodeNotFound", f"node {name} is not registered")
            if info.state != ACTIVE:
                self.nodes[int(name)] = msgspec.structs.replace(info, state=ACTIVE)
                self._plan()
            return True
        if op == "forget":
            return self._forget(int(name))
        if op == "hosts":
            return list(self.hosted_by(int(name)))
        if op == "moved":
            return self._moved(int(name), int(cmd["add"]), int(cmd["remove"]))
        if op == "groups":
            return self._set_groups(int(cmd["groups"]))
        raise NewerLayout(f"unknown catalog command {op!r}: a newer release's command")

    def _enable(self, name: str, index: int) -> bool:
        if name not in feature_flags.KNOWN:
            raise InvariantBroken(
                f"catalog entry {index} enables feature {name!r}, which this release does not "
                f"know: run a release that supports it"
            )
        if name in self.features:
            return False
        self.features[name] = index
        return True

    def _init(self, groups: int, replication: int, founders: list[int]) -> object:
        if self.placements:
            return True
        missing = [f for f in founders if int(f) not in self.nodes]
        if missing:
            return Refused("Unavailable", f"founding nodes {missing} have not registered yet")
        if groups < 1 or replication < 1 or groups > MAX_DATA_GROUPS:
            return Refused(
                "InvalidParameter",
                f"groups (1..{MAX_DATA_GROUPS}) and replication must be at least 1",
            )
        self.replication = replication
        self.founders = tuple(sorted(int(f) for f in founders))
        # The founders alone: nodes that joined before init take replicas through moves.
        founding = {n: self.nodes[n] for n in self.founders}
        self.placements = {}
        self._found(list(range(1, groups + 1)), founding)
        self._plan()
        return True

    def _found(self, new: list[int], nodes: dict[int, NodeInfo]) -> None:
        """Place the new data groups ``new`` on ``nodes`` (each with a data directory)."""
        for g, founded in place_groups(new, nodes, self.placements, self.replication).items():
            for n in founded.replicas:
                founded = founded.with_dir(n, pick_dir(n, self.nodes, self.placements))  # noqa: PLW2901
            self.placements[g] = founded

    def _set_groups(self, groups: int) -> object:
        if not self.placements:
            return Refused("Unavailable", "the cluster is not initialized yet")
        have = len(self.placements)
        if groups < have:
            return Refused(
                "InvalidParameter",
                f"the cluster has {have} data groups; their number can grow but not shrink "
                f"(asked for {groups})",
            )
        if groups > MAX_DATA_GROUPS:
            return Refused(
                "InvalidParameter", f"at most {MAX_DATA_GROUPS} data groups (asked for {groups})"
            )
        first = max(self.placements) + 1
        new = list(range(first, first + groups - have))
        if new:
            self._found(new, self.nodes)
            self._plan()
        return new

    def _drain(self, node: int) -> object:
        info = self.nodes.get(node)
        if info is None:
            return Refused("NodeNotFound", f"node {node} is not registered")
        if info.state == DRAINING:
            return True
        active = sum(1 for i in self.nodes.values() if i.state == ACTIVE)
        if self.placements and active - 1 < self.replication:
            return Refused(
                "NodeBusy",
                f"draining node {node} would leave {active - 1} active nodes for "
                f"{self.replication} replicas per group",
            )
        self.nodes[node] = msgspec.structs.replace(info, state=DRAINING)
        self._plan()
        return True

    def _forget(self, node: int) -> object:
        if node not in self.nodes:
            return Refused("NodeNotFound", f"node {node} is not registered")
        held = sorted(g for g, p in self.placements.items() if node in p.hosts())
        if held:
            return Refused(
                "NodeBusy", f"node {node} still holds replicas of groups {held}: drain it first"
            )
        del self.nodes[node]
        return True

    def _moved(self, group: int, add: int, remove: int) -> object:
        p = self.placements.get(group)
        if p is None or p.move is None or (p.move.add, p.move.remove) != (add, remove):
            return False
        done = GroupPlacement(
            replicas=p.goal(), founders=p.founders, move=None, moved=True, dirs=p.dirs
        )
        self.placements[group] = done.with_dir(remove, None) if remove else done
        self._plan()
        return True

    def _plan(self) -> None:
        if not self.placements:
            return
        # A move onto a node that is no longer active is cancelled: the goal is the replicas
        # again, so the group's leader removes that node (learner or voter) and the catalog
        # plans the group anew.
        for g, p in list(self.placements.items()):
            target = self.nodes.get(p.move.add) if p.move is not None else None
            if p.move is not None and (target is None or target.state != ACTIVE):
                cancelled = msgspec.structs.replace(p, move=None, moved=True)
                self.placements[g] = cancelled.with_dir(p.move.add, None)
        moves = plan_moves(self.nodes, self.placements, self.replication, MAX_MOVES)
        for g, move in moves.items():
            d = pick_dir(move.add, self.nodes, self.placements)
            self.placements[g] = msgspec.structs.replace(self.placements[g], move=move).with_dir(
                move.add, d
            )

    def _least_loaded(self) -> int:
        return min(self.placements, key=lambda g: (self._load.get(g, 0), g))

    # -- reads ------------------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return bool(self.placements)

    @property
    def data_groups(self) -> tuple[int, ...]:
        return tuple(sorted(self.placements))

    def group_of(self, name: str) -> int | None:
        return self.queues.get(name)

    def names(self) -> list[str]:
        return sorted(self.queues)

    def meta_of(self, name: str) -> dict[str, str] | None:
        """The metadata of ``name`` (a copy; empty when none), None when it is not placed."""
        if name not in self.queues:
            return None
        return dict(self.meta.get(name, {}))

    def node_info(self, node: int) -> NodeInfo | None:
        return self.nodes.get(node)

    def placement(self, group: int) -> GroupPlacement | None:
        return self.placements.get(group)

    def hosted_by(self, node: int) -> tuple[int, ...]:
        """The data groups ``node`` should run a replica of now."""
        hosted = self._hosted.get(node)
        if hosted is None:
            hosted = tuple(g for g, p in sorted(self.placements.items()) if node in p.hosts())
            self._hosted[node] = hosted
        return hosted

    def moving(self) -> tuple[int, ...]:
        """The data groups with a replica move in flight, in id order."""
        if self._moving is None:
            moving = sorted(g for g, p in self.placements.items() if p.move is not None)
            self._moving = tuple(moving)
        return self._moving

    def preferred_leaders(self) -> dict[int, int]:
        """`cmq.catalog.placement.preferred_leaders` of this catalog (a copy)."""
        if self._preferred is None:
            self._preferred = preferred_leaders(self.placements, self.nodes)
        return dict(self._preferred)

    def groups(self) -> dict[int, dict[str, Any]]:
        """Every data group: replicas, the move in flight, founders and queue count."""
        out: dict[int, dict[str, Any]] = {}
        for g, p in sorted(self.placements.items()):
            dirs = {}
            for n, d in p.dirs:
                info = self.nodes.get(n)
                if info is not None and d < len(info.data_dirs):
                    dirs[n] = info.data_dirs[d]
            out[g] = {
                "replicas": list(p.replicas),
                "data_dirs": dirs,
                "move": None if p.move is None else {"add": p.move.add, "remove": p.move.remove},
                "queues": self._load.get(g, 0),
            }
        return out

    # -- snapshots --------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        image = CatalogImage(  # sorted: equal catalogs have equal images
            queues=dict(sorted(self.queues.items())),
            nodes=dict(sorted(self.nodes.items())),
            groups=dict(sorted(self.placements.items())),
            replication=self.replication,
            founders=self.founders,
            meta={q: dict(sorted(m.items())) for q, m in sorted(self.meta.items())},
            keys=self.keys.image() if self.keys.keys or self.keys.bootstrap else {},
            features=dict(sorted(self.features.items())),
        )
        return encode_image(image)

    def restore(self, index: int, data: bytes) -> None:
        self._hosted.clear()
        self._preferred = self._moving = None
        if not data:
            self.__init__()  # type: ignore[misc]
            return
        image = decode_image(index, data)
        self.queues = dict(image.queues)
        self._load = {}
        for g in self.queues.values():
            self._load[g] = self._load.get(g, 0) + 1
        self.nodes = dict(image.nodes)
        self.placements = dict(image.groups)
        self.replication = image.replication
        self.founders = image.founders
        self.meta = {q: dict(m) for q, m in image.meta.items()}
        self.keys.restore(image.keys)
        self.features = dict(image.features)


__all__ = [
    "CATALOG_IMAGE_VERSION",
    "Assignment",
    "CatalogMachine",
    "GroupPlacement",
    "Move",
    "NodeInfo",
    "Refused",
]
