"""Who signed a request, as the handlers see it (`api.routing.Context.caller`). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from cmq.grants import KeyGrant


@dataclass(frozen=True, slots=True)
class Caller:
    """Who signed a request (`api.auth.guard` verified it): the access key id and its grants
    as the node knew them when the request arrived."""

    access_key_id: str
    grants: tuple[KeyGrant, ...]
