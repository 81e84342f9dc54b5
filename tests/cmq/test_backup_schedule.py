"""What backup/restore and the queue-to-queue moves keep of a message's times (issue 28): a
restored message becomes visible when it would have and expires at its time-to-live deadline
(backup format 2, absolute times, turned into a delay and a time to live by the restoring
node); a version 1 line keeps the delay it had left, beyond 900 s too; a dead-letter move and
a move task back keep the deadline; a deadline farther than the destination's retention is
brought within it."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from api.backup_models import ImportMessage
from cmq.backup.dump import backup
from cmq.backup.format import BackupMessage, read_manifest
from cmq.backup.load import import_json, restore
from cmq.client import Client
from cmq.client.backup import export_page
from cmq.client.types import Message
from cmq.export_values import ImportedMessage, imported_delay_ms
from cmq.model import OutgoingMessage, QueueAttributes, send_refusal, within_retention
from cmq.redrive import Moving, copies, move_batch
from tests.cmq.backup_helpers import api_cluster
from tests.cmq.helpers import one_node


async def _export(client: Client, name: str) -> dict[str, dict[str, Any]]:
    """The live messages of ``name`` by body (one page is enough here)."""
    page = await export_page(client, name, 0, 0)
    assert page["next_after"] is None
    return {m["body"]: m for m in page["messages"]}


async def test_a_restore_keeps_deliver_times_and_ttl_deadlines(tmp_path: Path) -> None:
    out = tmp_path / "backup"
    async with api_cluster(tmp_path / "a") as (_, _, client):
        await client.create_queue("later", {"max_delay_seconds": 7200})
        at = datetime.now(UTC) + timedelta(minutes=30)
        await client.send(
            "later",
            [
                Message("in-an-hour", delay_seconds=3600),  # beyond 900 s
                Message("at", deliver_at=at),
                Message("ten-minutes", ttl_seconds=600),
                Message("one-second", ttl_seconds=1),
                Message("plain"),
            ],
        )
        source = await _export(client, "later")
        await backup(client, out)
    manifest = read_manifest(out)
    (entry,) = manifest.queues
    lines = {
        json.loads(line)["id"]: json.loads(line)
        for line in (out / entry.file).read_text().splitlines()
    }
    assert len(lines) == 5
    for body in ("in-an-hour", "at"):
        assert lines[source[body]["id"]]["visible_at"] == source[body]["visible_at"] > 0
    for body in ("ten-minutes", "one-second"):
        assert lines[source[body]["id"]]["ttl_deadline"] == source[body]["ttl_deadline"] > 0
    assert (
        "ttl_deadline" not in source["plain"] and "visible_at" not in lines[source["plain"]["id"]]
    )
    # Let the short time to live run out before the restore: it must expire there, unseen.
    wait = source["one-second"]["ttl_deadline"] / 1000 - time.time() + 0.2
    await asyncio.sleep(max(0.0, wait))
    async with api_cluster(tmp_path / "b") as (_, _, client_b):
        report = await restore(client_b, out)
        assert report.messages == {"later": 5}
        got = await _export(client_b, "later")
        for body in ("in-an-hour", "at"):  # the same time, give or take the import's commit
            assert got[body]["state"] == "delayed"
            assert abs(got[body]["visible_at"] - source[body]["visible_at"]) < 1000, body
        assert abs(got["ten-minutes"]["ttl_deadline"] - source["ten-minutes"]["ttl_deadline"]) < (
            1000
        )
        assert "ttl_deadline" not in got["plain"]
        received = await client_b.receive("later", 10)
        assert sorted(str(m.body) for m in received) == ["plain", "ten-minutes"]
        info = await client_b.get_queue("later")
        assert info.stats.delayed == 2 and info.stats.expired_total == 1


def test_import_objects_of_both_format_versions() -> None:
    v2 = BackupMessage("m", b"x", 1, "delayed", delay_ms=5, visible_at=9_000, ttl_deadline=7)
    assert import_json(v2) == {"id": "m", "body": "x", "deliver_at": 9_000, "ttl_deadline": 7}
    # Version 1: the delay left when read, no longer cut to 900 s (up to 7 days).
    v1 = msgspec.json.decode(
        b'{"id":"m","body":"eA==","sent_at":1,"state":"delayed","delay_ms":1200000}',
        type=BackupMessage,
    )
    assert import_json(v1) == {"id": "m", "body": "x", "delay_ms": 1_200_000}
    visible = BackupMessage("m", b"x", 1, "in_flight", visible_at=0, ttl_deadline=0)
    assert import_json(visible) == {"id": "m", "body": "x"}


def test_the_import_route_takes_absolute_times_and_the_node_makes_them_relative() -> None:
    got = msgspec.convert(
        {"id": "m", "body": "x", "deliver_at": 5_000, "ttl_deadline": 9_000}, ImportMessage
    ).to_model()
    assert (got.deliver_at_ms, got.ttl_deadline_ms, got.delay_ms) == (5_000, 9_000, 0)
    assert imported_delay_ms(got, 3_000) == 2_000 and imported_delay_ms(got, 6_000) == 0
    assert imported_delay_ms(ImportedMessage("m", b"", False, (), 700), 6_000) == 700
    with pytest.raises(msgspec.ValidationError, match="not both"):
        msgspec.convert({"id": "m", "body": "x", "delay_ms": 1, "deliver_at": 5}, ImportMessage)
    long = msgspec.convert({"id": "m", "body": "x", "delay_ms": 604_800_000}, ImportMessage)
    assert long.delay_ms == 604_800_000
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"id": "m", "body": "x", "delay_ms": 604_800_001}, ImportMessage)


def test_copies_keep_the_deadline_and_a_deadline_is_kept_within_retention() -> None:
    (copy,) = copies("q", [Moving("id-1", b"x", False, (), None, 123_456)], "move")
    assert copy.ttl_deadline_ms == 123_456 and copy.ttl_seconds is None
    attrs = QueueAttributes(message_retention_seconds=60)
    m = OutgoingMessage(b"x", ttl_deadline_ms=1_000 + 61_000)
    assert within_retention(m, attrs, 1_000).ttl_deadline_ms == 61_000
    near = OutgoingMessage(b"x", ttl_deadline_ms=2_000)
    assert within_retention(near, attrs, 1_000) is near
    both = OutgoingMessage(b"x", ttl_seconds=5, ttl_deadline_ms=2_000)
    refused = send_refusal("q", both, attrs)
    assert refused is not None and "not both" in refused.message


async def test_moves_keep_the_ttl_deadline(tmp_path: Path) -> None:
    async with one_node(tmp_path, housekeeping_interval=0.05) as node:
        await node.create_queue("dlq", QueueAttributes(message_retention_seconds=3600))
        attrs = QueueAttributes(visibility_timeout=0, dead_letter_queue="dlq", max_receive_count=1)
        await node.create_queue("work", attrs)
        await node.send("work", [OutgoingMessage(b"m", ttl_seconds=600), OutgoingMessage(b"n")])
        [first, _] = await node.receive("work", 10, None, 0)
        assert first.ttl_deadline_ms is not None
        deadline = first.ttl_deadline_ms
        assert await node.receive("work", 10, None, 0) == []  # both marked for the DLQ
        for _ in range(100):  # the housekeeper's move
            page = await node.export_messages("dlq", 0, 0, 10)
            if len(page.messages) == 2:
                break
            await asyncio.sleep(0.05)
        by_body = {m.body: m for m in page.messages}
        # The dead-letter copy: the same deadline, give or take how far the destination
        # queue's time ran ahead of the proposing node's clock (a millisecond or so).
        assert 0 <= (by_body[b"m"].ttl_deadline_ms or 0) - deadline < 1000
        assert by_body[b"n"].ttl_deadline_ms is None
        # And back with a move task (a lease of the dead-letter queue, copies, acks).
        await node.create_queue("back", QueueAttributes())
        moved = await move_batch(node, "dlq", "back", 10, lease_seconds=30, origin="redrive")
        assert moved.moved == 2
        back = {m.body: m for m in (await node.export_messages("back", 0, 0, 10)).messages}
        assert 0 <= (back[b"m"].ttl_deadline_ms or 0) - deadline < 1000
        assert back[b"n"].ttl_deadline_ms is None
