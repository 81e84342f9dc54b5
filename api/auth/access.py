"""Which action each request needs, on which queue. Pure: the tables and the look-ups.

Actions are `cmq.grants`' (``send``, ``receive``, ``delete``, ``admin``) plus two that need no
particular grant:

* `ANY`: a grant of any action on the request's queue (reading a queue's attributes and stats,
  its URL);
* `SIGNED`: any valid key (listing queue names, the cluster status).

A request whose queue is None needs ``admin`` on ``*`` (cluster administration: nodes, keys,
group digests). A native route states its action itself (`api.routing.Route.action`; unless it
says otherwise ``admin``, on its queue when its path names one, else on the cluster) and an SQS
operation missing from `SQS` needs ``admin`` on the cluster, so a new route is open to
administrators only until it is given its action. The tables are documented in ``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cmq.grants import ADMIN, DELETE, RECEIVE, SEND, KeyGrant, permits

__all__ = [
    "ADMIN",
    "ANY",
    "DELETE",
    "OPEN_OPERATIONS",
    "RECEIVE",
    "SEND",
    "SIGNED",
    "SQS",
    "STREAM",
    "NativeOperation",
    "allowed",
    "native_need",
    "sqs_need",
]
"""The actions are re-exported: the route tables name them from here, not from `cmq.grants`."""

ANY = "any"
SIGNED = "signed"


@dataclass(frozen=True, slots=True)
class NativeOperation:
    """A native route as the guard sees it: its OpenAPI operationId, the action it needs and
    whether on its queue. Each route states these itself (`api.routing.Route.action`, the key
    routes and the stream in `api.app`); a route the guard has none for needs ``admin``."""

    operation_id: str
    action: str = ADMIN
    on_queue: bool = False


OPEN_OPERATIONS = frozenset({"healthz", "readyz", "metrics", "openapi"})
"""Native routes served without a signature: probes (Kubernetes and load balancers call them
unsigned), the Prometheus exposition (scrapers), the API's description. The web console's
files under ``/ui`` are open too (static files; its API calls are signed like any other)."""

SQS: dict[str, str] = {
    "ListQueues": SIGNED,
    "GetQueueUrl": ANY,
    "GetQueueAttributes": ANY,
    "ListQueueTags": ANY,
    "ListDeadLetterSourceQueues": ANY,
    "CreateQueue": ADMIN,
    "DeleteQueue": ADMIN,
    "PurgeQueue": ADMIN,
    "SetQueueAttributes": ADMIN,
    "TagQueue": ADMIN,
    "UntagQueue": ADMIN,
    "AddPermission": ADMIN,
    "RemovePermission": ADMIN,
    "StartMessageMoveTask": ADMIN,
    "CancelMessageMoveTask": ADMIN,
    "ListMessageMoveTasks": ADMIN,
    "SendMessage": SEND,
    "SendMessageBatch": SEND,
    "ReceiveMessage": RECEIVE,
    "DeleteMessage": DELETE,
    "DeleteMessageBatch": DELETE,
    "ChangeMessageVisibility": DELETE,
    "ChangeMessageVisibilityBatch": DELETE,
}
"""SQS operation -> the action it needs on its queue (``QueueUrl``, else ``QueueName``)."""


STREAM: dict[str, str] = {"send": SEND, "subscribe": RECEIVE, "ack": DELETE, "nack": DELETE}
"""Streaming protocol frame (`cmq.stream`) -> the action it needs on its queue. Opening the
stream needs a valid key; each frame is then checked against the key's grants as it arrives."""


def allowed(grants: Iterable[KeyGrant], action: str, queue: str | None) -> bool:
    """Whether ``grants`` allow ``action`` on ``queue`` (None: the cluster)."""
    if action == SIGNED:
        return True
    if action == ANY:
        grants = tuple(grants)
        if queue is None:
            return permits(grants, ADMIN, None)
        return any(permits(grants, a, queue) for a in (SEND, RECEIVE, DELETE, ADMIN))
    return permits(grants, action, queue)


def native_need(operation: NativeOperation | None, queue: str) -> tuple[str, str | None]:
    """(action, queue or None) a native route needs (None: a route without a need: admin on
    the cluster)."""
    if operation is None:
        return ADMIN, None
    return operation.action, (queue if operation.on_queue and queue else None)


def sqs_need(operation: str, queue: str | None) -> tuple[str, str | None]:
    """(action, queue or None) an SQS operation needs (unknown: admin on the cluster)."""
    if operation not in SQS:
        return ADMIN, None
    return SQS[operation], queue
