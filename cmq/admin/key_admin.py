"""A node's access keys at work: `KeyRing` answers the HTTP surface's look-ups (secret and
grants of a key id) from the node's own copy of the catalog, and `KeyAdmin` changes the keys
through the meta group (`cmq.routing.rpc.CatalogCall`, forwarded to its leader like every catalog
command). `bootstrap_admin_key` creates a fresh cluster's first admin key and writes it, once,
to a file in the node's data directory (mode 0600).

Secrets are opened with the node's `cmq.catalog.keys.Vault` (derived from the cluster secret) and
kept in memory only; nothing here logs a secret.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import orjson

from cmq.catalog import META_GROUP
from cmq.catalog.keys import (
    KeyStore,
    Vault,
    cluster_credential,
    new_key_id,
    new_secret,
)
from cmq.catalog.meta import CatalogMachine
from cmq.errors import CmqError
from cmq.grants import ADMIN, KeyGrant, KeyRecord
from cmq.routing.router import Router
from cmq.routing.rpc import CatalogCall

log = logging.getLogger(__name__)

ADMIN_KEY_FILE = "admin-key.json"
"""The bootstrap admin key's file name in a node's (first) data directory."""
_CLUSTER_GRANTS = (KeyGrant("*", (ADMIN,)),)


class KeyRing:
    """Look-ups of key ids for request verification: the catalog's keys plus the cluster
    credential (`cmq.catalog.keys.cluster_credential`), an admin key."""

    def __init__(self, catalog: CatalogMachine, cluster_secret: bytes) -> None:
        self._catalog = catalog
        self._vault = Vault.of(cluster_secret)
        self._cluster_id, self._cluster_secret = cluster_credential(cluster_secret)
        self._opened: dict[tuple[str, str], str] = {}

    def secret_of(self, key_id: str) -> str | None:
        """The key's secret; None when the key is unknown (or deleted)."""
        if key_id == self._cluster_id:
            return self._cluster_secret
        record = self._catalog.keys.keys.get(key_id)
        if record is None:
            return None
        cached = self._opened.get((key_id, record.sealed))
        if cached is None:
            cached = self._vault.open(key_id, record.sealed)
            if cached is None:
                log.error(
                    "access key %s does not open with this node's cluster secret",
                    key_id,
                    extra={"event": "access_key_unsealed_failed"},
                )
                return None
            if len(self._opened) > 10_000:
                self._opened.clear()
            self._opened[(key_id, record.sealed)] = cached
        return cached

    def grants_of(self, key_id: str) -> tuple[KeyGrant, ...] | None:
        """The key's grants now; None when the key is unknown (or deleted)."""
        if key_id == self._cluster_id:
            return _CLUSTER_GRANTS
        record = self._catalog.keys.keys.get(key_id)
        return None if record is None else record.grants

    # -- what an HTTP front end copies (`cmq.frontend.keys`) ---------------------------------------
    def generation(self) -> int:
        """A number that changes whenever the keys may have changed (`KeyStore.generation`)."""
        return self._catalog.keys.generation

    def opened(self) -> list[tuple[KeyRecord, str]]:
        """Every stored key with its secret opened (a key that does not open is left out, as
        `secret_of` refuses it), by id."""
        out = []
        for key_id in sorted(self._catalog.keys.keys):
            secret = self.secret_of(key_id)
            if secret is not None:
                out.append((self._catalog.keys.keys[key_id], secret))
        return out

    def cluster_key(self) -> tuple[str, str]:
        """The cluster credential (id, secret): an admin key derived from the cluster secret,
        which stays here (`cmq.catalog.keys.cluster_credential`)."""
        return self._cluster_id, self._cluster_secret


class KeyAdmin:
    """Creates, lists, grants, revokes and deletes keys (every change through Raft)."""

    def __init__(
        self,
        catalog: CatalogMachine,
        router: Router,
        cluster_secret: bytes,
        clock_ms: Callable[[], int],
    ) -> None:
        self._catalog = catalog
        self._router = router
        self._vault = Vault.of(cluster_secret)
        self._clock_ms = clock_ms

    async def create(self, grants: tuple[KeyGrant, ...]) -> tuple[KeyRecord, str]:
        """A new key with ``grants``: its record and its secret (the only time it is told)."""
        key_id, secret = new_key_id(), new_secret()
        sealed = self._vault.seal(key_id, secret)
        cmd = KeyStore.create(key_id, sealed, grants, self._clock_ms())
        return _record(await self._router.run(CatalogCall(META_GROUP, cmd))), secret

    def list(self) -> list[KeyRecord]:
        """Every key, by id (this node's copy of the catalog)."""
        keys = self._catalog.keys.keys
        return [keys[k] for k in sorted(keys)]

    async def grant(self, key_id: str, grant: KeyGrant) -> KeyRecord:
        """Add ``grant`` to the key; `AccessKeyNotFound` when it is unknown."""
        cmd = KeyStore.grant(key_id, grant)
        return _record(await self._router.run(CatalogCall(META_GROUP, cmd)))

    async def revoke(self, key_id: str, pattern: str) -> KeyRecord:
        """Remove the key's grant on ``pattern``."""
        cmd = KeyStore.revoke(key_id, pattern)
        return _record(await self._router.run(CatalogCall(META_GROUP, cmd)))

    async def delete(self, key_id: str) -> None:
        """Forget the key; requests signed with it are refused from then on."""
        await self._router.run(CatalogCall(META_GROUP, KeyStore.delete(key_id)))


def _record(raw: object) -> KeyRecord:
    return msgspec.convert(raw, KeyRecord)


async def bootstrap_admin_key(
    catalog: CatalogMachine,
    router: Router,
    cluster_secret: bytes,
    data_dir: str,
    clock_ms: Callable[[], int],
    *,
    poll: float = 0.5,
) -> Path | None:
    """Make sure the cluster has its bootstrap admin key and that this node's ``data_dir``
    holds it in `ADMIN_KEY_FILE` (written once, mode 0600; the path, never the secret, is
    logged). Waits for the catalog to be initialized; the first proposal to commit wins, so
    every node of a fresh cluster writes the same key. Returns the file, or None when the
    bootstrap key was deleted before this node wrote it."""
    path = Path(data_dir) / ADMIN_KEY_FILE
    vault = Vault.of(cluster_secret)
    while not catalog.keys.bootstrap:
        if catalog.initialized:
            key_id = new_key_id()
            cmd = KeyStore.create_bootstrap(key_id, vault.seal(key_id, new_secret()), clock_ms())
            try:
                await router.run(CatalogCall(META_GROUP, cmd))
            except CmqError as e:
                log.info("admin key bootstrap deferred: %s", e)
        if not catalog.keys.bootstrap:
            await asyncio.sleep(poll)
    if path.exists():
        return path
    key_id = catalog.keys.bootstrap
    record = catalog.keys.keys.get(key_id)
    secret = None if record is None else vault.open(key_id, record.sealed)
    if secret is None:
        return None
    body = orjson.dumps(
        {"access_key_id": key_id, "secret_access_key": secret}, option=orjson.OPT_INDENT_2
    )
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, body + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    log.warning(
        "the bootstrap admin access key %s was written to %s",
        key_id,
        path,
        extra={"event": "admin_key_written"},
    )
    print(f"admin access key written to {path}", flush=True)
    return path
