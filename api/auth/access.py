"""Which action each request needs, on which queue. Pure: the tables and the look-ups.

Actions are `cmq.grants`' (``send``, ``receive``, ``delete``, ``admin``) plus two that need no
particular grant:

* `ANY`: a grant of any action on the request's queue (reading a queue's attributes and stats,
  its URL);
* `SIGNED`: any valid key (listing queue names, the cluster status).

A request whose queue is None needs ``admin`` on ``*`` (cluster administration: nodes, keys,
group digests). A native route or SQS operation missing from the tables needs ``admin`` too, so
a new route is closed until it is mapped. The tables are documented in ``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import Iterable

from cmq.grants import ADMIN, DELETE, RECEIVE, SEND, KeyGrant, permits

ANY = "any"
SIGNED = "signed"

NATIVE: dict[str, tuple[str, bool]] = {
    # operationId: (action, whether the action is on the route's queue)
    "listQueues": (SIGNED, False),
    "createQueue": (ADMIN, True),
    "getQueue": (ANY, True),
    "setQueueAttributes": (ADMIN, True),
    "deleteQueue": (ADMIN, True),
    "purgeQueue": (ADMIN, True),
    "rewindQueue": (ADMIN, True),
    "sendMessages": (SEND, True),
    "peekMessages": (RECEIVE, True),
    "receiveMessages": (RECEIVE, True),
    "ackMessages": (DELETE, True),
    "changeVisibility": (DELETE, True),
    "nackMessages": (DELETE, True),
    "listSegments": (RECEIVE, True),
    "readSegmentRecords": (RECEIVE, True),
    "claimSegments": (ADMIN, True),
    "markSegmentsArchived": (ADMIN, True),
    "clusterStatus": (SIGNED, False),
    "whoami": (SIGNED, False),
    "groupDigest": (ADMIN, False),
    "listNodes": (ADMIN, False),
    "joinNode": (ADMIN, False),
    "drainNode": (ADMIN, False),
    "activateNode": (ADMIN, False),
    "removeNode": (ADMIN, False),
    "setGroups": (ADMIN, False),
    "listFeatures": (ADMIN, False),
    "enableFeatures": (ADMIN, False),
    "listKeys": (ADMIN, False),
    "createKey": (ADMIN, False),
    "getKey": (ADMIN, False),
    "deleteKey": (ADMIN, False),
    "grantKey": (ADMIN, False),
    "revokeKey": (ADMIN, False),
    "exportCatalog": (ADMIN, False),
    "importCatalog": (ADMIN, False),
    "exportMessages": (ADMIN, False),
    "importMessages": (ADMIN, False),
    "openStream": (SIGNED, False),
}
"""Native route (its OpenAPI operationId) -> the action it needs and whether on its queue."""

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


def native_need(operation_id: str, queue: str) -> tuple[str, str | None]:
    """(action, queue or None) a native route needs (unmapped: admin on the cluster)."""
    action, on_queue = NATIVE.get(operation_id, (ADMIN, False))
    return action, (queue if on_queue and queue else None)


def sqs_need(operation: str, queue: str | None) -> tuple[str, str | None]:
    """(action, queue or None) an SQS operation needs (unknown: admin on the cluster)."""
    if operation not in SQS:
        return ADMIN, None
    return SQS[operation], queue
