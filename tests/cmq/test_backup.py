"""``cmq backup`` / ``cmq restore`` in process: two one-node clusters behind the native API;
the first loaded, backed up, restored into the second and compared; reruns, conflicts, a newer
format and a damaged file refused; the import and export commands of the state machine."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest

from cmq.backup.dump import backup
from cmq.backup.errors import (
    BackupTargetNotEmpty,
    InvalidBackup,
    NewerBackupFormat,
    RestoreConflict,
)
from cmq.backup.format import FORMAT_VERSION, MANIFEST, read_manifest
from cmq.backup.load import restore
from cmq.client.backup import import_messages
from cmq.client.types import Message
from cmq.errors import ImportConflict
from cmq.fsm.commands import CommandFailed, NewMessage, Produce, decode_command, encode_command
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import MemorySegmentStore
from cmq.model import QueueAttributes
from tests.cmq.backup_helpers import SECRET, api_cluster, differences, load, snapshot


def _machine() -> QueueMachine:
    return QueueMachine(MemorySegmentStore())


def _apply(m: QueueMachine, cmd: object) -> object:
    m._index = getattr(m, "_index", 0) + 1  # type: ignore[attr-defined]
    return m.apply(m._index, encode_command(cmd))  # type: ignore[arg-type,attr-defined]


def test_import_command_round_trips_and_plain_sends_encode_as_before() -> None:
    msg = NewMessage("id-1", b"x", False, (("k", "v"),), 0, "d", None)
    plain = Produce("q", 5, (msg,))
    imported = Produce("q", 5, (msg,), expect_sent=7)
    assert decode_command(encode_command(imported)).expect_sent == 7  # type: ignore[union-attr]
    assert decode_command(encode_command(plain)).expect_sent is None  # type: ignore[union-attr]
    assert encode_command(imported)[: len(encode_command(plain))] == encode_command(plain)


def test_import_applies_only_at_the_expected_count_and_bypasses_dedup() -> None:
    from cmq.fsm.commands import CreateQueue

    m = _machine()
    _apply(m, CreateQueue("q", QueueAttributes(), 1))
    one = NewMessage("a", b"1", False, (), 0, "same", None)
    two = NewMessage("b", b"2", False, (), 0, "same", None)
    res = _apply(m, Produce("q", 2, (one, two), expect_sent=0))
    assert not isinstance(res, CommandFailed)
    assert [s.id for s in m.read("q", [1, 2])] == ["a", "b"]  # same dedup id, both stored
    again = _apply(m, Produce("q", 3, (one, two), expect_sent=0))
    assert isinstance(again, CommandFailed) and again.code == ImportConflict.code
    stats = m.stats("q", 3)
    assert stats is not None and stats.sent_total == 2


async def test_backup_restore_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "backup"
    async with api_cluster(tmp_path / "a") as (node_a, keys_a, client_a):
        await load(client_a, keys_a, node_a)
        before = await snapshot(client_a)
        report = await backup(client_a, out)
        assert report.queues == 4
        # The backup leased nothing: in-flight and visible counts are as they were.
        after = await snapshot(client_a)
        assert differences(before, after) == []
    manifest = read_manifest(out)
    assert manifest.format_version == FORMAT_VERSION
    assert {"placement", "groups", "metadata", "keys"} <= set(manifest.catalog)
    states = (out / manifest.queues[2].file).read_bytes()
    assert b'"state":"in_flight"' in states and b'"state":"delayed"' in states
    async with api_cluster(tmp_path / "b") as (_, _, client_b):
        restored = await restore(client_b, out)
        assert sum(restored.messages.values()) == report.messages
        got = await snapshot(client_b)
        assert differences(before, got) == []
        # Receive counts start again; in-flight messages are visible, delayed ones are not.
        orders = await client_b.get_queue("orders")
        assert orders.stats.in_flight == 0 and orders.stats.delayed == 1
        received = await client_b.receive("orders", 10)
        assert all(m.receive_count == 1 for m in received)
        # A rerun changes nothing (every queue already holds its messages).
        rerun = await restore(client_b, out)
        assert sum(rerun.messages.values()) == 0
        assert rerun.queues_created == []


async def test_comparison_catches_a_dropped_message(tmp_path: Path) -> None:
    out = tmp_path / "backup"
    async with api_cluster(tmp_path / "a") as (node_a, keys_a, client_a):
        await load(client_a, keys_a, node_a)
        before = await snapshot(client_a)
        await backup(client_a, out)
    manifest = read_manifest(out)
    entry = next(e for e in manifest.queues if e.name == "orders")
    path = out / entry.file
    lines = path.read_bytes().splitlines(keepends=True)
    dropped = msgspec.json.decode(lines[3])["id"]
    path.write_bytes(b"".join(lines[:3] + lines[4:]))
    # The manifest guards the file: a planted drop is refused before anything changes...
    async with api_cluster(tmp_path / "b") as (_, _, client_b):
        with pytest.raises(InvalidBackup, match="SHA-256"):
            await restore(client_b, out)
        assert await client_b.list_queues() == []
        # ... and with the manifest forged to match, the comparison names the missing message.
        raw = msgspec.json.decode((out / MANIFEST).read_bytes())
        for q in raw["queues"]:
            if q["name"] == "orders":
                q["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
                q["messages"] -= 1
        (out / MANIFEST).write_bytes(msgspec.json.encode(raw))
        await restore(client_b, out)
        diffs = differences(before, await snapshot(client_b))
        assert diffs == [f"queue orders: message {dropped} only in one"]


async def test_restore_refuses_a_queue_written_by_someone_else(tmp_path: Path) -> None:
    out = tmp_path / "backup"
    async with api_cluster(tmp_path / "a") as (_, _, client_a):
        await client_a.create_queue("q")
        await client_a.send("q", [Message(f"m{i}") for i in range(3)])
        await backup(client_a, out)
        with pytest.raises(BackupTargetNotEmpty):
            await backup(client_a, out)
    async with api_cluster(tmp_path / "b") as (_, _, client_b):
        await client_b.create_queue("q")
        await client_b.send("q", [Message("stranger")])
        with pytest.raises(RestoreConflict, match="not among the backup's"):
            await restore(client_b, out)
        with pytest.raises(ImportConflict):
            await import_messages(client_b, "q", 0, [{"id": "x", "body": "y"}])
        assert (await client_b.get_queue("q")).stats.sent_total == 1


async def test_a_newer_format_and_other_cluster_secret_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "backup"
    async with api_cluster(tmp_path / "a") as (node_a, keys_a, client_a):
        await load(client_a, keys_a, node_a)
        await backup(client_a, out)
    async with api_cluster(tmp_path / "b", secret=SECRET + b"-other") as (_, _, client_b):
        with pytest.raises(Exception, match="does not open with this cluster's secret"):
            await restore(client_b, out)
    raw = msgspec.json.decode((out / MANIFEST).read_bytes())
    raw["format_version"] = FORMAT_VERSION + 1
    (out / MANIFEST).write_bytes(msgspec.json.encode(raw))
    with pytest.raises(NewerBackupFormat) as e:
        read_manifest(out)
    assert str(out / MANIFEST) in e.value.message
    assert f"version {FORMAT_VERSION + 1}" in e.value.message
    assert f"format version {FORMAT_VERSION})" in e.value.message


class WithFlags:
    """A catalog that reports feature flags (as a catalog with them will)."""

    def __init__(self, catalog: object) -> None:
        self._catalog = catalog
        self.feature_flags = {"fast-acks": True}

    def __getattr__(self, name: str) -> object:
        return getattr(self._catalog, name)


async def test_a_catalog_section_the_restore_does_not_know_is_kept_and_skipped(
    tmp_path: Path,
) -> None:
    out = tmp_path / "backup"
    async with api_cluster(tmp_path / "a") as (node_a, _, client_a):
        node_a.backups._catalog = WithFlags(node_a.catalog)  # type: ignore[assignment]
        await client_a.create_queue("q")
        await backup(client_a, out)
    manifest = read_manifest(out)
    assert manifest.catalog["feature_flags"] == "catalog/feature_flags.json"
    assert msgspec.json.decode((out / "catalog/feature_flags.json").read_bytes()) == {
        "fast-acks": True
    }
    async with api_cluster(tmp_path / "b") as (_, _, client_b):
        report = await restore(client_b, out)
        assert report.sections_skipped == ["feature_flags"]
        assert await client_b.list_queues() == ["q"]
