"""The access key administration routes of the native API (``/v1/keys``), mounted by
`api.app.make_app` when requests are authenticated. Every one needs ``admin`` on ``*`` (the
guard's default, `api.auth.access.NativeOperation`). A key's secret is answered once, by
``POST /v1/keys``.

* ``GET /v1/keys``: ``{"keys": [{"access_key_id", "grants", "created_ms"}]}``;
* ``POST /v1/keys`` ``{"grants": [{"pattern", "actions"}]}``: 201 with the key and its
  ``secret_access_key``;
* ``GET /v1/keys/{key}``, ``DELETE /v1/keys/{key}``;
* ``POST /v1/keys/{key}/grants`` ``{"pattern", "actions"}``: add a grant;
* ``POST /v1/keys/{key}/revoke`` ``{"pattern"}``: remove the grant on that pattern.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import web

from cmq.errors import AccessKeyNotFound, InvalidParameter
from cmq.grants import KeyGrant, KeyRecord, check_grant

KEY_OPERATIONS: dict[tuple[str, str], str] = {
    ("GET", "/v1/keys"): "listKeys",
    ("POST", "/v1/keys"): "createKey",
    ("GET", "/v1/keys/{key}"): "getKey",
    ("DELETE", "/v1/keys/{key}"): "deleteKey",
    ("POST", "/v1/keys/{key}/grants"): "grantKey",
    ("POST", "/v1/keys/{key}/revoke"): "revokeKey",
}
"""(method, route) -> operationId of the key routes (all need admin on the cluster)."""


class KeyAdministration(Protocol):
    """What the routes call (`cmq.admin.key_admin.KeyAdmin` on a node)."""

    async def create(self, grants: tuple[KeyGrant, ...]) -> tuple[KeyRecord, str]: ...

    def list(self) -> list[KeyRecord]: ...

    async def grant(self, key_id: str, grant: KeyGrant) -> KeyRecord: ...

    async def revoke(self, key_id: str, pattern: str) -> KeyRecord: ...

    async def delete(self, key_id: str) -> None: ...


def key_json(record: KeyRecord) -> dict[str, Any]:
    """A key as answered: never its secret, sealed or not."""
    return {
        "access_key_id": record.id,
        "grants": [{"pattern": g.pattern, "actions": list(g.actions)} for g in record.grants],
        "created_ms": record.created_ms,
    }


def _reply(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as e:
        raise InvalidParameter(f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidParameter("the body must be a JSON object")
    return body


def _grant(raw: object) -> KeyGrant:
    if not isinstance(raw, dict):
        raise InvalidParameter('a grant is {"pattern": ..., "actions": [...]}')
    try:
        return check_grant(raw.get("pattern"), raw.get("actions"))
    except ValueError as e:
        raise InvalidParameter(str(e)) from None


def add_key_routes(app: web.Application, admin: KeyAdministration) -> None:
    """Mount the key routes on ``app`` (see the module docstring)."""

    def find(key_id: str) -> KeyRecord:
        for record in admin.list():
            if record.id == key_id:
                return record
        raise AccessKeyNotFound(f"no access key {key_id}")

    async def list_keys(_: web.Request) -> web.StreamResponse:
        return _reply({"keys": [key_json(r) for r in admin.list()]})

    async def create_key(request: web.Request) -> web.StreamResponse:
        raw = (await _json(request)).get("grants", [])
        if not isinstance(raw, list):
            raise InvalidParameter("grants must be a list")
        record, secret = await admin.create(tuple(_grant(g) for g in raw))
        return _reply({**key_json(record), "secret_access_key": secret}, 201)

    async def get_key(request: web.Request) -> web.StreamResponse:
        return _reply(key_json(find(request.match_info["key"])))

    async def delete_key(request: web.Request) -> web.StreamResponse:
        key_id = find(request.match_info["key"]).id
        await admin.delete(key_id)
        return _reply({"access_key_id": key_id, "deleted": True})

    async def grant_key(request: web.Request) -> web.StreamResponse:
        grant = _grant(await _json(request))
        return _reply(key_json(await admin.grant(request.match_info["key"], grant)))

    async def revoke_key(request: web.Request) -> web.StreamResponse:
        pattern = (await _json(request)).get("pattern")
        if not isinstance(pattern, str):
            raise InvalidParameter("pattern must be a string")
        return _reply(key_json(await admin.revoke(request.match_info["key"], pattern)))

    handlers: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
        "listKeys": list_keys,
        "createKey": create_key,
        "getKey": get_key,
        "deleteKey": delete_key,
        "grantKey": grant_key,
        "revokeKey": revoke_key,
    }
    for (method, path), operation in KEY_OPERATIONS.items():
        app.router.add_route(method, path, handlers[operation])
