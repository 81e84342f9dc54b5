"""Access grants: what an access key may do (pure; the contract the HTTP surface checks
requests against and the catalog stores).

A grant is a queue-name glob pattern (``fnmatch`` syntax: ``*``, ``?``, ``[...]``) and a set
of actions among `ACTIONS`: ``send``, ``receive``, ``delete`` (ack, change visibility, nack,
delete a message) and ``admin``, which implies every action on the matching queues, and, on the
pattern ``*``, the cluster's administration (queue creation and deletion, nodes, keys). A
`KeyRecord` is a stored key as the catalog keeps it (`cmq.catalog.keys`): never its secret in
clear.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

import msgspec

SEND = "send"
RECEIVE = "receive"
DELETE = "delete"
ADMIN = "admin"
ACTIONS = (SEND, RECEIVE, DELETE, ADMIN)
"""Every action a grant may carry."""
KEY_ID = re.compile(r"^AKCMQ[A-Z0-9]{16}$")
"""What a stored key id looks like."""
PATTERN = re.compile(r"^[A-Za-z0-9_\-*?\[\]!]{1,80}$")
"""What a grant's queue pattern may contain: queue-name characters and glob syntax."""
MAX_GRANTS = 100
"""Grants per key."""


class KeyGrant(msgspec.Struct, frozen=True):
    """``actions`` on the queues whose name matches ``pattern``."""

    pattern: str
    actions: tuple[str, ...]

    def permits(self, action: str, queue: str | None) -> bool:
        """Whether this grant allows ``action`` on ``queue`` (None: the cluster itself, which
        only ``admin`` on ``*`` covers)."""
        if queue is None:
            return ADMIN in self.actions and self.pattern == "*"
        if not fnmatchcase(queue, self.pattern):
            return False
        return ADMIN in self.actions or action in self.actions


class KeyRecord(msgspec.Struct, frozen=True):
    """A stored key: never its secret in clear."""

    id: str
    sealed: str
    grants: tuple[KeyGrant, ...]
    created_ms: int


def permits(grants: Iterable[KeyGrant], action: str, queue: str | None) -> bool:
    """Whether any of ``grants`` allows ``action`` on ``queue`` (see `KeyGrant.permits`)."""
    return any(g.permits(action, queue) for g in grants)


def check_grant(pattern: object, actions: object) -> KeyGrant:
    """The grant, or `ValueError` naming what is wrong (pattern syntax, unknown action)."""
    if not isinstance(pattern, str) or not PATTERN.match(pattern):
        raise ValueError(f"a grant's pattern matches {PATTERN.pattern}; got {pattern!r}")
    if not isinstance(actions, list | tuple) or not actions:
        raise ValueError(f"a grant names at least one action among {', '.join(ACTIONS)}")
    for action in actions:
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
    return KeyGrant(pattern, tuple(sorted(set(actions))))
