"""Access keys: the catalog's key state (pure, deterministic) and the sealing of their secrets
under the cluster secret.

An access key is an id (``AKCMQ`` + 16 upper-case letters and digits) and a secret (40 URL-safe
characters) a client signs its requests with (AWS Signature Version 4, `api.auth`). The meta
group's catalog (`cmq.catalog.meta.CatalogMachine` hooks `KeyStore` in) records each key's id, its
secret *sealed* (AES-256-GCM under a key derived with HKDF-SHA256 from the cluster secret, the
key id as associated data, so a sealed secret cannot be moved to another id), its grants and
its creation time. The node that proposes a key seals its secret, so the Raft log, snapshots and
the catalog never hold a secret in clear; any node (it has the cluster secret) can open it to
verify a signature. A secret is returned once, by the call that creates the key, never after.

Grants, what a key may do, are the contract's (`cmq.grants`, re-exported here).

Commands (`KeyStore.create` ...) are JSON like the catalog's others; `KeyStore.apply` answers a
result or a `cmq.catalog.meta.Refused`-shaped refusal (``code``, ``message``): nothing changes on a
refusal. Times come in the commands (``created_ms``): apply has no clock.

Apart from the catalog: the *cluster credential* (`cluster_credential`), an admin key derived
from the cluster secret, which every holder of the cluster secret (a node joining through
another, an operator on a node) can sign with, and is never stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import os
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from cmq.errors import NewerLayout
from cmq.grants import (
    ACTIONS,
    ADMIN,
    DELETE,
    MAX_GRANTS,
    RECEIVE,
    SEND,
    KeyGrant,
    KeyRecord,
    check_grant,
    permits,
)

KEY_COMMANDS = frozenset({"key.create", "key.bootstrap", "key.delete", "key.grant", "key.revoke"})
"""The ``key.*`` catalog commands this release applies (`KeyStore.apply`)."""
_ALPHABET = string.ascii_uppercase + string.digits
_GENERATIONS = itertools.count(1)
"""Every `KeyStore` change in this process takes the next number (`KeyStore.generation`)."""


class KeyRefused(msgspec.Struct, frozen=True):
    """A refused key command (nothing changed): an error code and why."""

    code: str
    message: str


class KeyStore:
    """The access keys of the catalog (see the module docstring). ``bootstrap`` is the id of the
    first admin key, created once per cluster (empty until then; it stays set when that key is
    deleted, so the bootstrap never repeats). ``generation`` changes whenever the keys may have
    changed (an applied ``key.*`` command, a restore): a process-wide counter, in memory only,
    never in a snapshot, so two stores of one process never share a value (HTTP front ends poll
    it to know when to copy the keys again, `cmq.frontend.keys`)."""

    __slots__ = ("bootstrap", "generation", "keys")

    def __init__(self) -> None:
        self.keys: dict[str, KeyRecord] = {}
        self.bootstrap = ""
        self.generation = next(_GENERATIONS)

    # -- commands ---------------------------------------------------------------------------------
    @staticmethod
    def create(key_id: str, sealed: str, grants: Iterable[KeyGrant], created_ms: int) -> bytes:
        """Command: record a new key. Result: the `KeyRecord`, or `KeyRefused` (the id exists)."""
        return _command("key.create", key_id, sealed=sealed, grants=grants, created_ms=created_ms)

    @staticmethod
    def create_bootstrap(key_id: str, sealed: str, created_ms: int) -> bytes:
        """Command: record the cluster's first admin key unless one was already bootstrapped.
        Result: the bootstrap key's id (this one, or the one recorded before)."""
        admin = [KeyGrant("*", (ADMIN,))]
        return _command("key.bootstrap", key_id, sealed=sealed, grants=admin, created_ms=created_ms)

    @staticmethod
    def grant(key_id: str, grant: KeyGrant) -> bytes:
        """Command: add ``grant`` (its actions join those of a grant on the same pattern).
        Result: the key's `KeyRecord` or `KeyRefused`."""
        return _command("key.grant", key_id, grants=[grant])

    @staticmethod
    def revoke(key_id: str, pattern: str) -> bytes:
        """Command: remove the grant on ``pattern``. Result: the `KeyRecord` or `KeyRefused`
        (unknown key or no such grant)."""
        return _command("key.revoke", key_id, pattern=pattern)

    @staticmethod
    def delete(key_id: str) -> bytes:
        """Command: forget the key. Result: True, or `KeyRefused` when it is unknown."""
        return _command("key.delete", key_id)

    def apply(self, op: str, key_id: str, cmd: dict[str, Any]) -> object:
        """Apply one ``key.*`` command (decoded by the catalog); an op not in `KEY_COMMANDS` is
        a newer release's command: `NewerLayout`, whatever the key (never answered per key)."""
        if op not in KEY_COMMANDS:
            raise NewerLayout(f"unknown catalog command {op!r}: a newer release's command")
        self.generation = next(_GENERATIONS)
        if op in ("key.create", "key.bootstrap"):
            if op == "key.bootstrap" and self.bootstrap:
                return self.bootstrap
            if key_id in self.keys:
                return KeyRefused("InvalidParameter", f"access key {key_id} exists")
            granted = tuple(_grant(g) for g in cmd["grants"])
            self.keys[key_id] = KeyRecord(
                key_id, str(cmd["sealed"]), granted, int(cmd["created_ms"])
            )
            if op == "key.bootstrap":
                self.bootstrap = key_id
                return key_id
            return self.keys[key_id]
        record = self.keys.get(key_id)
        if record is None:
            return KeyRefused("AccessKeyNotFound", f"no access key {key_id}")
        if op == "key.delete":
            del self.keys[key_id]
            return True
        grants: dict[str, set[str]]
        if op == "key.grant":
            added = _grant(cmd["grants"][0])
            grants = {g.pattern: set(g.actions) for g in record.grants}
            if added.pattern not in grants and len(grants) >= MAX_GRANTS:
                return KeyRefused("InvalidParameter", f"a key carries at most {MAX_GRANTS} grants")
            grants.setdefault(added.pattern, set()).update(added.actions)
        elif op == "key.revoke":
            grants = {g.pattern: set(g.actions) for g in record.grants}
            if grants.pop(str(cmd["pattern"]), None) is None:
                return KeyRefused(
                    "InvalidParameter", f"access key {key_id} has no grant on {cmd['pattern']!r}"
                )
        else:
            raise AssertionError(op)  # pragma: no cover - KEY_COMMANDS lists the ops above
        new = tuple(KeyGrant(p, tuple(sorted(a))) for p, a in sorted(grants.items()))
        self.keys[key_id] = msgspec.structs.replace(record, grants=new)
        return self.keys[key_id]

    # -- snapshots --------------------------------------------------------------------------------
    def image(self) -> dict[str, Any]:
        """The keys as a snapshot part (sorted: equal stores have equal images)."""
        return {
            "keys": [msgspec.to_builtins(self.keys[k]) for k in sorted(self.keys)],
            "bootstrap": self.bootstrap,
        }

    def restore(self, image: dict[str, Any] | None) -> None:
        """Replace the keys by those of ``image`` (None or empty: no keys)."""
        image = image or {}
        records = msgspec.convert(image.get("keys", []), list[KeyRecord])
        self.keys = {r.id: r for r in records}
        self.bootstrap = str(image.get("bootstrap", ""))
        self.generation = next(_GENERATIONS)


def _command(op: str, key_id: str, **fields: Any) -> bytes:
    if "grants" in fields:
        fields["grants"] = [msgspec.to_builtins(g) for g in fields["grants"]]
    return orjson.dumps({"op": op, "name": key_id, **fields})


def _grant(raw: Any) -> KeyGrant:
    return KeyGrant(str(raw["pattern"]), tuple(str(a) for a in raw["actions"]))


# -- secrets ---------------------------------------------------------------------------------
def new_key_id() -> str:
    """A fresh random key id."""
    return "AKCMQ" + "".join(secrets.choice(_ALPHABET) for _ in range(16))


def new_secret() -> str:
    """A fresh random secret (240 bits)."""
    return secrets.token_urlsafe(30)


@dataclass(frozen=True, slots=True)
class Vault:
    """Seals and opens key secrets under a key derived from the cluster secret. Holds key
    material: never logged."""

    _aead: AESGCM

    @classmethod
    def of(cls, cluster_secret: bytes) -> Vault:
        hkdf = HKDF(hashes.SHA256(), 32, salt=b"cmq access keys", info=b"aes-256-gcm v1")
        return cls(AESGCM(hkdf.derive(cluster_secret)))

    def seal(self, key_id: str, secret: str) -> str:
        """``secret`` encrypted for ``key_id`` (fresh nonce), as text."""
        nonce = os.urandom(12)
        sealed = nonce + self._aead.encrypt(nonce, secret.encode(), key_id.encode())
        return base64.b64encode(sealed).decode()

    def open(self, key_id: str, sealed: str) -> str | None:
        """The secret ``seal`` sealed for ``key_id``; None when it does not open (another
        cluster secret, another id, altered bytes)."""
        try:
            raw = base64.b64decode(sealed, validate=True)
            return self._aead.decrypt(raw[:12], raw[12:], key_id.encode()).decode()
        except (InvalidTag, ValueError):
            return None


CLUSTER_KEY_PREFIX = "AKCMQCLUSTER"


def cluster_credential(cluster_secret: bytes) -> tuple[str, str]:
    """The (key id, secret) derived from the cluster secret: an admin credential of every node
    and every holder of the cluster secret (see the module docstring)."""
    digest = hmac.new(cluster_secret, b"cmq cluster access key", hashlib.sha256).digest()
    key_id = CLUSTER_KEY_PREFIX + base64.b32encode(digest[:5]).decode()
    return key_id, base64.urlsafe_b64encode(digest[5:]).decode().rstrip("=")


__all__ = [
    "ACTIONS",
    "ADMIN",
    "DELETE",
    "RECEIVE",
    "SEND",
    "KeyGrant",
    "KeyRecord",
    "KeyRefused",
    "KeyStore",
    "Vault",
    "check_grant",
    "cluster_credential",
    "new_key_id",
    "new_secret",
    "permits",
]
