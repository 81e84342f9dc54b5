"""``GET /v1/whoami``: what the signing key may do, for clients that adapt to it (the web
console shows only what the key is granted). Any valid key may call it
(its `api.routing.Route.action`); on a node serving unsigned requests (``--anonymous``) it answers
``anonymous: true`` and no key, since every request is then allowed.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from api.auth.access import SIGNED
from api.models import _Response
from api.routing import Context, Reply, Response, Route
from cmq.grants import ADMIN, permits


class GrantView(_Response):
    """One grant: ``actions`` on the queues whose name matches the glob ``pattern``."""

    pattern: str
    actions: list[str]


class WhoAmI(_Response, kw_only=True):
    """The caller's key and grants."""

    access_key_id: Annotated[str | None, Meta(description="the signing key (null: anonymous)")]
    anonymous: Annotated[
        bool, Meta(description="the node serves unsigned requests: everything is allowed")
    ]
    grants: Annotated[list[GrantView], Meta(description="the key's grants (empty: anonymous)")]
    cluster_admin: Annotated[
        bool, Meta(description="admin on '*': nodes, keys, queue creation, message moves")
    ]


async def whoami(ctx: Context, _: None) -> Reply:
    caller = ctx.caller
    if caller is None:
        return Reply(WhoAmI(access_key_id=None, anonymous=True, grants=[], cluster_admin=True))
    grants = [GrantView(g.pattern, list(g.actions)) for g in caller.grants]
    return Reply(
        WhoAmI(
            access_key_id=caller.access_key_id,
            anonymous=False,
            grants=grants,
            cluster_admin=permits(caller.grants, ADMIN, None),
        )
    )


WHOAMI_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/whoami",
        "whoami",
        "The signing access key and its grants (any valid key)",
        whoami,
        (Response(200, "The caller", WhoAmI),),
        description="Grants are queue-name globs (fnmatch: *, ?, [...]) and actions among send, "
        "receive, delete and admin (admin implies the others on its queues, and on '*' the "
        "cluster's administration). On a node run with --anonymous: anonymous true, no key, "
        "no grants, and every request is allowed.",
        action=SIGNED,
    ),
)
"""The route, listed in `api.routes.ROUTES`."""
