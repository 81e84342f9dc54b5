"""`BackupAdmin`: a node's side of ``cmq backup`` and ``cmq restore`` (the client side is
`cmq.backup`), behind the admin routes ``/v1/backup/catalog`` and ``/v1/queues/{name}/export``
and ``.../import``.

* `export_catalog`: the catalog's sections as this node's copy holds them, as JSON values:
  ``placement`` (queue -> data group), ``groups`` (the data group ids), ``metadata`` (queue ->
  string pairs), ``keys`` (each access key with its secret still *sealed* under the cluster
  secret, its grants and creation time). A section the catalog does not have is absent (a
  newer catalog adds its own, such as ``feature_flags``).
* `import_catalog`: recreate keys (sealed as given: each must open with this cluster's secret,
  else the whole call is refused before anything changes) and queue metadata (for queues that
  exist). Idempotent: a key already present with the same sealed secret is left as is.
* `export_messages`: one page of a queue's live messages, read at its leader
  (`cmq.fsm.export`).
* `import_messages`: store messages with their ids, priority levels and tenants (a `Produce`
  with ``expect_sent``): refused with `ImportConflict` unless the queue has had exactly
  ``expect_sent`` messages sent.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import msgspec

from cmq.catalog import META_GROUP
from cmq.catalog.keys import KeyStore, Vault
from cmq.catalog.meta import CatalogMachine
from cmq.errors import InvalidParameter, InvariantBroken, QueueNotFound
from cmq.export_values import (
    MAX_EXPORT_PAGE,
    MAX_IMPORT_BATCH,
    ExportPage,
    ImportedMessage,
    imported_delay_ms,
)
from cmq.fsm.commands import NewMessage, Produce, encode_command
from cmq.grants import KEY_ID, KeyRecord, check_grant
from cmq.model import SentMessage, check_queue_name, is_fifo_name
from cmq.routing.router import Router
from cmq.routing.rpc import CatalogCall, ExportCall, ProduceCall
from cmq.upgrade.features import (
    FAIR_QUEUES,
    MESSAGE_IMPORT,
    MESSAGE_PRIORITIES,
    MESSAGE_TTL,
    not_enabled,
)
from raftlog.runtime import Clock


def release() -> str:
    """This node's cmq release (the installed distribution's version)."""
    try:
        return importlib.metadata.version("cmq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def key_json(record: KeyRecord) -> dict[str, Any]:
    """A key as a backup holds it: its secret sealed, never in clear."""
    return {
        "access_key_id": record.id,
        "sealed": record.sealed,
        "grants": [{"pattern": g.pattern, "actions": list(g.actions)} for g in record.grants],
        "created_ms": record.created_ms,
    }


def parse_key(raw: object) -> KeyRecord:
    """A key of a backup's ``keys`` section (`key_json`); `InvalidParameter` naming what is
    wrong."""
    if not isinstance(raw, dict):
        raise InvalidParameter("a key is an object with access_key_id, sealed and grants")
    key_id, sealed, created = raw.get("access_key_id"), raw.get("sealed"), raw.get("created_ms")
    if not isinstance(key_id, str) or not KEY_ID.match(key_id):
        raise InvalidParameter(f"{key_id!r} is not an access key id")
    if not isinstance(sealed, str) or not sealed:
        raise InvalidParameter(f"key {key_id}: sealed must be a non-empty string")
    if not isinstance(created, int) or created < 0:
        raise InvalidParameter(f"key {key_id}: created_ms must be a non-negative integer")
    grants = raw.get("grants")
    if not isinstance(grants, list):
        raise InvalidParameter(f"key {key_id}: grants must be a list")
    checked = []
    for g in grants:
        try:
            checked.append(check_grant(g.get("pattern"), g.get("actions")))
        except (ValueError, AttributeError) as e:
            raise InvalidParameter(f"key {key_id}: {e}") from None
    return KeyRecord(key_id, sealed, tuple(checked), created)


class BackupAdmin:
    """The node operations of a backup and a restore (see the module docstring)."""

    def __init__(
        self, catalog: CatalogMachine, router: Router, cluster_secret: bytes, clock: Clock
    ) -> None:
        """``clock``: this node's, the time an import is built with (its group's leader
        stamps it again, as any send)."""
        self._catalog = catalog
        self._clock = clock
        self._router = router
        self._vault = Vault.of(cluster_secret)

    def export_catalog(self) -> dict[str, Any]:
        """The catalog's sections (see the module docstring) and this node's release."""
        catalog = self._catalog
        names = catalog.names()
        keys = catalog.keys.keys
        sections: dict[str, Any] = {
            "placement": {name: catalog.group_of(name) for name in names},
            "groups": list(catalog.data_groups),
            "metadata": {n: m for n in names if (m := catalog.meta_of(n))},
            "keys": [key_json(keys[k]) for k in sorted(keys)],
        }
        flags = getattr(catalog, "feature_flags", None)
        if flags is not None:  # a catalog with feature flags reports them
            sections["feature_flags"] = msgspec.to_builtins(flags)
        return {"release": release(), "sections": sections}

    async def import_catalog(
        self, raw_keys: list[Any], metadata: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        """Recreate the keys ``raw_keys`` (`key_json` objects) and ``metadata`` (see the
        module docstring); what was done: ``{"keys_created": [...], "keys_present": [...],
        "metadata": [queue, ...]}``. Everything is checked before anything changes."""
        keys = [parse_key(k) for k in raw_keys]
        for record in keys:
            if self._vault.open(record.id, record.sealed) is None:
                raise InvalidParameter(
                    f"access key {record.id} does not open with this cluster's secret: a backup's "
                    "keys restore only into a cluster started with the same cluster secret"
                )
        for name in metadata:
            check_queue_name(name)
            if self._catalog.group_of(name) is None:
                raise QueueNotFound(f"queue {name!r} does not exist (create it first)")
        created, present = [], []
        for record in keys:
            existing = self._catalog.keys.keys.get(record.id)
            if existing is not None and existing.sealed == record.sealed:
                present.append(record.id)
                continue
            cmd = KeyStore.create(record.id, record.sealed, record.grants, record.created_ms)
            await self._router.run(CatalogCall(META_GROUP, cmd))  # a refusal is raised
            created.append(record.id)
        done = []
        for name, pairs in sorted(metadata.items()):
            cmd = CatalogMachine.update_meta(name, dict(pairs), [])
            await self._router.run(CatalogCall(META_GROUP, cmd))
            done.append(name)
        return {"keys_created": created, "keys_present": present, "metadata": done}

    async def export_messages(self, name: str, after: int, upto: int, limit: int) -> ExportPage:
        """A page of ``name``'s export, read at its leader (`cmq.fsm.export.export_page`)."""
        check_queue_name(name)
        if not 1 <= limit <= MAX_EXPORT_PAGE:
            raise InvalidParameter(f"limit must be in [1, {MAX_EXPORT_PAGE}]; got {limit}")
        if after < 0 or upto < 0:
            raise InvalidParameter("after and upto must not be negative")
        return await self._router.run(
            ExportCall(self._router.group_of(name), name, after, upto, limit)
        )

    async def import_messages(
        self, name: str, messages: list[ImportedMessage], expect_sent: int
    ) -> list[SentMessage]:
        """Store ``messages`` with their ids, in order, if ``name`` has had exactly
        ``expect_sent`` messages sent (`ImportConflict` otherwise: nothing stored). Needs the
        `cmq.upgrade.features.MESSAGE_IMPORT` flag (`FeatureNotEnabled`): older releases cannot
        apply such a send; a message with a priority needs ``message_priorities``, a standard
        queue's message with a group id (its tenant) ``fair_queues`` and priority 0."""
        check_queue_name(name)
        if not self._catalog.feature_enabled(MESSAGE_IMPORT):
            raise not_enabled(MESSAGE_IMPORT, "imports")
        if not 1 <= len(messages) <= MAX_IMPORT_BATCH:
            raise InvalidParameter(f"an import holds 1 to {MAX_IMPORT_BATCH} messages")
        if expect_sent < 0:
            raise InvalidParameter("expect_sent must not be negative")
        ids = [m.id for m in messages]
        if len(set(ids)) != len(ids) or not all(ids):
            raise InvalidParameter("the messages of an import need distinct, non-empty ids")
        if any(m.delay_ms < 0 for m in messages):
            raise InvalidParameter("delay_ms must not be negative")
        if any(m.delay_ms and m.deliver_at_ms is not None for m in messages):
            raise InvalidParameter("give delay_ms or deliver_at, not both")
        if any(m.ttl_deadline_ms is not None for m in messages) and not (
            self._catalog.feature_enabled(MESSAGE_TTL)
        ):
            raise not_enabled(MESSAGE_TTL, "imports of messages with a time to live")
        if any(m.priority for m in messages) and not (
            self._catalog.feature_enabled(MESSAGE_PRIORITIES)
        ):
            raise not_enabled(MESSAGE_PRIORITIES, "imports of messages with a priority")
        if not is_fifo_name(name) and any(m.group_id is not None for m in messages):
            if not self._catalog.feature_enabled(FAIR_QUEUES):
                raise not_enabled(FAIR_QUEUES, "imports of standard-queue messages with a tenant")
            if any(m.group_id is not None and m.priority for m in messages):
                raise InvalidParameter(
                    "a standard queue's message with a group_id (a fair-queue tenant) takes "
                    "priority 0: priorities and tenants do not combine"
                )
        now = self._clock.wall_ms()
        new = tuple(
            NewMessage(
                m.id,
                m.body,
                m.binary,
                m.attributes,
                imported_delay_ms(m, now),
                m.dedup_id,
                m.group_id,
                ttl_ms=None if m.ttl_deadline_ms is None else max(1, m.ttl_deadline_ms - now),
                priority=m.priority,
            )
            for m in messages
        )
        command = encode_command(Produce(name, now, new, expect_sent=expect_sent))
        sent = await self._router.run(ProduceCall(self._router.group_of(name), command))
        if len(sent) != len(messages):
            raise InvariantBroken(f"an import of {len(messages)} stored {len(sent)}")
        return sent
