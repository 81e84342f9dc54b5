"""The backup and restore routes for `cmq.client.Client` (``docs/api.md``, "Backup and
restore"): thin typed calls used by `cmq.backup`. Reads are retried freely; an import is
retried only when certainly not processed (its ``expect_sent`` makes a repeat after an unknown
outcome fail with ``ImportConflict``, which the caller resolves by reading ``sent_total``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from cmq.client.aio import Client
from cmq.client.retry import Safety
from cmq.client.types import Json


def _q(name: str) -> str:
    return f"/v1/queues/{quote(name, safe='')}"


async def export_catalog(client: Client) -> dict[str, Any]:
    """``{"release", "sections"}`` (``GET /v1/backup/catalog``)."""
    got: dict[str, Any] = await client._http.call(
        "GET", "/v1/backup/catalog", None, Safety.IDEMPOTENT
    )
    return got


async def import_catalog(
    client: Client, keys: list[dict[str, Any]], metadata: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """Recreate sealed keys and queue metadata (``POST /v1/backup/catalog``; idempotent)."""
    body: Json = {"keys": keys, "metadata": metadata}
    got: dict[str, Any] = await client._http.call(
        "POST", "/v1/backup/catalog", body, Safety.IDEMPOTENT
    )
    return got


async def export_page(
    client: Client, name: str, after: int, upto: int, limit: int = 1000
) -> dict[str, Any]:
    """One page of the queue's export (``GET /v1/queues/{name}/export``), as answered."""
    path = f"{_q(name)}/export?after={after}&upto={upto}&limit={limit}"
    got: dict[str, Any] = await client._http.call("GET", path, None, Safety.IDEMPOTENT)
    return got


async def import_messages(client: Client, name: str, expect_sent: int, messages: list[Json]) -> int:
    """Store ``messages`` (import objects) if the queue's sent_total is ``expect_sent``;
    returns its sent_total after (``POST /v1/queues/{name}/import``)."""
    body: Json = {"expect_sent": expect_sent, "messages": messages}
    got = await client._http.call("POST", f"{_q(name)}/import", body, Safety.ONCE)
    return int(got["sent_total"])
