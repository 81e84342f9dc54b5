"""The leader hint of a front end (``cmq serve --http-workers``): where the ``Cmq-Leader`` header
and the stream's hint point (docs/api.md, "Leader hint"), read from the copy of the node's
status the front end already keeps (`cmq.frontend.proxy.ServiceProxy.status`, refreshed every
`cmq.frontend.proxy.STATE_SECONDS`). Pure: no I/O.

It asks the node nothing more, so no front-end call and no wire version is added; the price is
that the hint can be up to one refresh late after a leadership change (a stale hint is only a
preference: the node it names forwards the call and names the new leader) and that it names
only leaders of groups the node hosts (the status lists those; for others it gives none, as
the node itself does for a leader it does not know).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def leader_from_status(status: Mapping[str, Any], name: str) -> str:
    """The HTTP address (``host:port`` as the catalog records it) of the node leading queue
    ``name``'s group, per ``status`` (a node's ``/v1/status``: ``node``, ``placement``,
    ``groups``, ``nodes``), when that is another node; "" otherwise (this node leads, the queue
    or its leader is unknown, the leader recorded no address, or ``status`` is empty)."""
    try:
        group = status["placement"].get(name)
        if group is None:
            return ""
        view = status["groups"].get(str(group))
        lead = 0 if view is None else view.get("leader") or 0
        if lead in (0, status["node"]):
            return ""
        info = status["nodes"].get(str(lead))
    except (KeyError, AttributeError, TypeError):
        return ""
    http = None if not isinstance(info, Mapping) else info.get("http")
    return http if isinstance(http, str) else ""
