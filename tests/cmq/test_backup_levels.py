"""What backup/restore keeps of priorities and fair-queue tenants (issue 28; backup format 3):
a dump holds each live message's level and a standard queue's tenant, a restore puts them
back, so the restored queue delivers in the source's order; a version 2 backup still restores
(priority 0, no tenant); a version 4 one is refused with its code; an import with a level the
queue does not have, or a tenant with a level, is refused whole."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest

from api.backup_models import ImportMessage
from cmq.backup.dump import backup, backup_message
from cmq.backup.errors import NewerBackupFormat
from cmq.backup.format import (
    FORMAT_VERSION,
    MANIFEST,
    BackupMessage,
    Manifest,
    QueueEntry,
    encode_manifest,
    encode_message,
    queue_file,
    read_manifest,
)
from cmq.backup.load import import_json, restore
from cmq.client import Client
from cmq.client.backup import export_page, import_messages
from cmq.client.types import Message
from cmq.errors import InvalidParameter
from cmq.export_values import LiveMessage
from tests.cmq.backup_helpers import api_cluster

# Levels sent out of order, so a restore that dropped them would deliver in send order.
LEVELS = (0, 3, 1, 3, 0, 2, 1, 0)
# Tenants with backlogs of different sizes; None: the tenant without a group id.
TENANTS = ("a", "a", "a", "b", None, "c", "b", "a", None, "c")


async def _load(client: Client) -> None:
    await client.create_queue("prio", {"priorities": 4})
    await client.send("prio", [Message(f"p{i}", priority=p) for i, p in enumerate(LEVELS)])
    await client.create_queue("fair")
    await client.send("fair", [Message(f"t{i}", group_id=t) for i, t in enumerate(TENANTS)])


async def _drain(client: Client, name: str) -> list[str]:
    """The bodies of ``name`` as receives of one message at a time get them (none acked)."""
    out: list[str] = []
    while got := await client.receive(name, 1):
        out.extend(str(m.body) for m in got)
    return out


async def _export(client: Client, name: str) -> dict[str, dict[str, object]]:
    page = await export_page(client, name, 0, 0)
    return {str(m["body"]): m for m in page["messages"]}


async def test_a_restore_keeps_priorities_and_tenants_and_their_order(tmp_path: Path) -> None:
    out = tmp_path / "backup"
    async with api_cluster(tmp_path / "a") as (_, _, client_a):
        await _load(client_a)
        exported = await _export(client_a, "prio") | await _export(client_a, "fair")
        await backup(client_a, out)
        order = {q: await _drain(client_a, q) for q in ("prio", "fair")}
    # The source's own order: levels high to low, tenants in turn.
    assert order["prio"] == ["p1", "p3", "p5", "p2", "p6", "p0", "p4", "p7"]
    assert order["fair"][:4] == ["t4", "t0", "t3", "t5"]
    assert exported["p1"]["priority"] == 3 and "priority" not in exported["p0"]
    assert exported["t3"]["group_id"] == "b" and "group_id" not in exported["t4"]
    manifest = read_manifest(out)
    assert manifest.format_version == FORMAT_VERSION == 3
    lines = {
        e.name: [json.loads(line) for line in (out / e.file).read_text().splitlines()]
        for e in manifest.queues
    }
    assert [m.get("priority", 0) for m in lines["prio"]] == list(LEVELS)
    assert [m.get("group_id") for m in lines["fair"]] == list(TENANTS)
    async with api_cluster(tmp_path / "b") as (_, _, client_b):
        report = await restore(client_b, out)
        assert report.messages == {"prio": len(LEVELS), "fair": len(TENANTS)}
        restored = await _export(client_b, "prio") | await _export(client_b, "fair")
        for body, m in exported.items():
            assert restored[body].get("priority") == m.get("priority"), body
            assert restored[body].get("group_id") == m.get("group_id"), body
        assert {q: await _drain(client_b, q) for q in ("prio", "fair")} == order


async def test_a_version_2_backup_restores_at_priority_0_without_tenants(tmp_path: Path) -> None:
    out = tmp_path / "v2"
    (out / "queues").mkdir(parents=True)
    lines = b"".join(
        encode_message(BackupMessage(f"id-{i}", f"m{i}".encode(), 1, "visible")) for i in range(3)
    )
    (out / queue_file(1)).write_bytes(lines)
    entry = QueueEntry(
        "old", {"priorities": 4}, queue_file(1), 3, hashlib.sha256(lines).hexdigest(), 4, 1, 2
    )
    (out / MANIFEST).write_bytes(encode_manifest(Manifest(2, "0.2.0", "0.2.0", 1, {}, [entry])))
    assert read_manifest(out).format_version == 2
    async with api_cluster(tmp_path / "b") as (_, _, client):
        await restore(client, out)
        got = await _export(client, "old")
        assert sorted(got) == ["m0", "m1", "m2"]
        assert all("priority" not in m and "group_id" not in m for m in got.values())
        assert await _drain(client, "old") == ["m0", "m1", "m2"]


def test_a_version_4_backup_is_refused_with_its_code(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_bytes(
        msgspec.json.encode({"format_version": 4, "release": "9", "queues": []})
    )
    with pytest.raises(NewerBackupFormat) as e:
        read_manifest(tmp_path)
    assert e.value.code == "NewerBackupFormat"
    assert "version 4" in e.value.message and "(format version 3)" in e.value.message


async def test_an_import_with_a_level_the_queue_lacks_or_a_leveled_tenant_stores_nothing(
    tmp_path: Path,
) -> None:
    async with api_cluster(tmp_path / "a") as (_, _, client):
        await client.create_queue("q", {"priorities": 2})
        ok = {"id": "ok", "body": "x", "priority": 1}
        with pytest.raises(InvalidParameter, match="priorities 2"):
            await import_messages(client, "q", 0, [ok, {"id": "hi", "body": "y", "priority": 2}])
        with pytest.raises(InvalidParameter, match="do not combine"):
            await import_messages(
                client, "q", 0, [ok, {"id": "t", "body": "y", "priority": 1, "group_id": "a"}]
            )
        assert (await client.get_queue("q")).stats.sent_total == 0
        assert await import_messages(client, "q", 0, [ok]) == 1
        assert (await _export(client, "q"))["x"]["priority"] == 1


def test_dump_and_load_lines_carry_priority_and_tenant() -> None:
    raw = {"id": "m", "body": "x", "sent_at": 1, "state": "visible", "priority": 3}
    line = backup_message(raw, 10)
    assert line.priority == 3 and b'"priority":3' in encode_message(line)
    assert import_json(line) == {"id": "m", "body": "x", "priority": 3}
    tenant = backup_message({**raw, "priority": 0, "group_id": "a"}, 10)
    assert b"priority" not in encode_message(tenant)  # level 0 is left out, as in version 2
    assert import_json(tenant) == {"id": "m", "body": "x", "group_id": "a"}
    got = msgspec.convert({"id": "m", "body": "x", "priority": 31}, ImportMessage).to_model()
    assert got.priority == 31
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"id": "m", "body": "x", "priority": 32}, ImportMessage)


def test_a_forwarded_export_with_levels_reads_both_ways() -> None:
    """An exported message gained ``priority``: a node of the previous release ignores the
    key in a forwarded reply, and this release reads a reply without it as level 0."""
    live = LiveMessage("m", 1, b"x", False, 5, (), "visible", 0, 0, priority=2)
    raw = msgspec.to_builtins(live)
    assert raw["priority"] == 2
    del raw["priority"]
    assert msgspec.convert(raw, LiveMessage).priority == 0
