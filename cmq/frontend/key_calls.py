"""The access key calls of the front-end socket (wire version 6, tags 36-40): what lets an HTTP
front end check signed requests itself. Pure: no I/O.

* `CopyKeys` (tag 36): the node's key ring as a front end needs it, a `KeyCopy` of every key's
  id, secret (opened: SigV4 checks need it), grants and creation time, plus the cluster
  credential (an admin key derived from the cluster secret; the cluster secret itself never
  crosses), tagged with the ring's generation. A front end sends the generation it holds and
  gets None while it is still the node's, so polling an unchanged ring costs one small frame.
* `CreateKey`, `GrantKey`, `RevokeKey`, `DeleteKey` (tags 37-40): the ``/v1/keys`` routes'
  changes, run by the node's key administration (through Raft, as on the node). A record that
  crosses carries no sealed secret.

The node answers them from `NodeKeys` (`cmq.frontend.proxy.ServiceServer`); a node serving
anonymous requests has none and answers them `Unavailable`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

import msgspec

from cmq.frontend.base import Call
from cmq.grants import KeyGrant, KeyRecord


class KeySource(Protocol):
    """The node's key ring as front ends copy it (`cmq.admin.key_admin.KeyRing`)."""

    def generation(self) -> int: ...

    def opened(self) -> list[tuple[KeyRecord, str]]: ...

    def cluster_key(self) -> tuple[str, str]: ...


class KeyChanges(Protocol):
    """The node's key administration (`cmq.admin.key_admin.KeyAdmin`)."""

    def create(self, grants: tuple[KeyGrant, ...]) -> Awaitable[tuple[KeyRecord, str]]: ...

    def grant(self, key_id: str, grant: KeyGrant) -> Awaitable[KeyRecord]: ...

    def revoke(self, key_id: str, pattern: str) -> Awaitable[KeyRecord]: ...

    def delete(self, key_id: str) -> Awaitable[None]: ...


@dataclass(frozen=True, slots=True)
class NodeKeys:
    """What a node serves its front ends' key calls from."""

    ring: KeySource
    admin: KeyChanges


class KeyEntry(msgspec.Struct, frozen=True, array_like=True):
    """One key as a front end holds it: never sealed, its secret opened."""

    id: str
    secret: str
    grants: tuple[KeyGrant, ...]
    created_ms: int


class KeyCopy(msgspec.Struct, frozen=True, array_like=True):
    """The node's key ring at ``generation``: the stored keys (by id) and the cluster
    credential (not a stored key: never listed)."""

    generation: int
    cluster: KeyEntry
    keys: list[KeyEntry]


class CreatedKey(msgspec.Struct, frozen=True, array_like=True):
    """A created key's record (no sealed secret) and its secret, told once."""

    record: KeyRecord
    secret: str


def _bare(record: KeyRecord) -> KeyRecord:
    """``record`` without its sealed secret (a front end never needs it)."""
    return msgspec.structs.replace(record, sealed="")


class CopyKeys(Call[KeyCopy | None], frozen=True, tag=36):
    """The key ring, unless its generation is still ``known`` (then None)."""

    known: int

    def serve(self, keys: NodeKeys) -> KeyCopy | None:
        generation = keys.ring.generation()
        if generation == self.known:
            return None
        cluster_id, cluster_secret = keys.ring.cluster_key()
        stored = [
            KeyEntry(r.id, secret, r.grants, r.created_ms) for r, secret in keys.ring.opened()
        ]
        return KeyCopy(generation, KeyEntry(cluster_id, cluster_secret, (), 0), stored)


class CreateKey(Call[CreatedKey], frozen=True, tag=37):
    grants: tuple[KeyGrant, ...]

    async def serve(self, keys: NodeKeys) -> CreatedKey:
        record, secret = await keys.admin.create(self.grants)
        return CreatedKey(_bare(record), secret)


class _KeyChange(Call[KeyRecord], frozen=True):
    """A change to one key's grants (no tag of its own): its ``key_id`` first, then the
    subclass's field; answered with the changed record without its sealed secret."""

    key_id: str

    def change(self, admin: KeyChanges) -> Awaitable[KeyRecord]:
        raise NotImplementedError

    async def serve(self, keys: NodeKeys) -> KeyRecord:
        return _bare(await self.change(keys.admin))


class GrantKey(_KeyChange, frozen=True, tag=38):
    grant: KeyGrant

    def change(self, admin: KeyChanges) -> Awaitable[KeyRecord]:
        return admin.grant(self.key_id, self.grant)


class RevokeKey(_KeyChange, frozen=True, tag=39):
    pattern: str

    def change(self, admin: KeyChanges) -> Awaitable[KeyRecord]:
        return admin.revoke(self.key_id, self.pattern)


class DeleteKey(Call[None], frozen=True, tag=40):
    key_id: str

    async def serve(self, keys: NodeKeys) -> None:
        await keys.admin.delete(self.key_id)


KeyCall = CopyKeys | CreateKey | GrantKey | RevokeKey | DeleteKey
"""Every key call (the server answers them from its `NodeKeys`)."""
KEY_CALLS = (CopyKeys, CreateKey, GrantKey, RevokeKey, DeleteKey)
