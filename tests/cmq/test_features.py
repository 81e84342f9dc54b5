"""Feature flags (`cmq.upgrade.features`): the catalog records enabled flags (replicated,
idempotent, never a flag this release does not know), a cluster formed by this release enables
every flag it knows, a flag is enabled only when every registered node supports it, a node refuses
to run on a cluster that enabled a flag it does not know, and the gated writes wait for their
flag."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from cmq.catalog.meta import CatalogMachine
from cmq.cli.main import main
from cmq.errors import (
    FeatureNotEnabled,
    FeatureUnsupported,
    InvalidParameter,
    InvariantBroken,
    SegmentNotReleased,
)
from cmq.export_values import ImportedMessage
from cmq.model import OutgoingMessage, QueueAttributes, RetryPolicy
from cmq.node.queue_node import QueueNode
from cmq.routing import rpc
from cmq.routing.rpc import ReleaseCall
from cmq.upgrade import features
from tests.cmq.helpers import configs, running
from tests.cmq.release_helpers import old_node_answer, serve_app


def test_the_catalog_enables_flags_once_and_refuses_unknown_ones() -> None:
    cat = CatalogMachine()
    assert not cat.feature_enabled(features.QUEUE_RETIME)
    assert cat.apply(5, CatalogMachine.enable_feature(features.QUEUE_RETIME)) is True
    assert cat.apply(6, CatalogMachine.enable_feature(features.QUEUE_RETIME)) is False
    assert cat.features == {features.QUEUE_RETIME: 5}
    with pytest.raises(InvariantBroken, match=r"'from_the_future'.*does not know"):
        cat.apply(7, CatalogMachine.enable_feature("from_the_future"))
    image = cat.snapshot()
    back = CatalogMachine()
    back.restore(8, image)
    assert back.features == {features.QUEUE_RETIME: 5} and back.snapshot() == image


def test_catalog_images_without_flags_are_unchanged_and_newer_ones_refused() -> None:
    cat = CatalogMachine()
    plain = cat.snapshot()
    assert b"features" not in plain and b"version" not in plain  # as images were before flags
    back = CatalogMachine()
    back.restore(1, plain)
    newer = orjson.loads(plain) | {"version": 2}
    with pytest.raises(InvariantBroken, match="version 2; this release reads versions up to 1"):
        back.restore(1, orjson.dumps(newer))
    unknown_field = orjson.loads(plain) | {"quotas": {}}
    with pytest.raises(InvariantBroken, match="quotas"):
        back.restore(1, orjson.dumps(unknown_field))


def _formed(cat: CatalogMachine, init: bytes) -> None:
    for n in (1, 2, 3):
        cat.apply(n, CatalogMachine.register_node(n, f"h:{n}", "", [f"/d{n}"], ""))
    assert cat.apply(4, init) is True


def test_a_cluster_formed_by_this_release_enables_every_flag_it_knows() -> None:
    cat = CatalogMachine()
    _formed(cat, CatalogMachine.init(2, 3, [1, 2, 3]))
    assert set(cat.features) == features.KNOWN
    # One formed by a release without flags (0.1.0) has none; a later init changes nothing.
    old = CatalogMachine()
    legacy_init = orjson.dumps(
        {"op": "init", "name": "", "groups": 2, "replication": 3, "founders": [1, 2, 3]}
    )
    _formed(old, legacy_init)
    assert old.features == {}
    assert old.apply(9, CatalogMachine.init(2, 3, [1, 2, 3])) is True
    assert old.features == {}


def test_a_release_refuses_a_cluster_that_enabled_a_flag_it_does_not_know() -> None:
    assert features.unknown({features.QUEUE_RETIME: 1, "zz_later": 2}) == ["zz_later"]
    assert features.unknown(features.KNOWN) == []


def _legacy_init(groups: int, replication: int, founders: list[int]) -> bytes:
    """`CatalogMachine.init` as releases without feature flags proposed it."""
    return orjson.dumps(
        {
            "op": "init",
            "name": "",
            "groups": groups,
            "replication": replication,
            "founders": founders,
        }
    )


async def test_flags_are_enabled_only_when_every_node_supports_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cluster formed without flags (as 0.1.0 formed it); node 3 answers the release call as
    a 0.1.0 node does, then as this release. Enabling waits for it; the gated import too."""
    monkeypatch.setattr(CatalogMachine, "init", staticmethod(_legacy_init))
    async with running(configs(tmp_path)) as nodes:
        handler = nodes[3].raft._call_handler
        assert handler is not None
        old = [True]

        async def maybe_old(peer: int, payload: bytes) -> bytes:
            try:
                call = rpc.decode_call(payload)
            except Exception:
                call = None
            if old[0] and isinstance(call, ReleaseCall):
                return old_node_answer(payload)
            return await handler(peer, payload)

        nodes[3].raft.set_call_handler(maybe_old)
        node: QueueNode = nodes[1]
        await node.create_queue("imports", QueueAttributes())
        one = [ImportedMessage("m1", b"x", False, ())]
        with pytest.raises(FeatureNotEnabled, match="message_import"):
            await node.import_messages("imports", one, 0)
        policy = QueueAttributes(visibility_timeout=1, retry=RetryPolicy(1, 2.0, 4))
        with pytest.raises(FeatureNotEnabled, match="retry_backoff"):
            await node.create_queue("retried", policy)
        with pytest.raises(FeatureNotEnabled, match="retry_backoff"):
            await node.set_attributes("imports", {"retry": {"initial_seconds": 1}})
        long = QueueAttributes(max_delay_seconds=7 * 86_400)
        with pytest.raises(FeatureNotEnabled, match="long_delays"):
            await node.create_queue("later", long)
        with pytest.raises(FeatureNotEnabled, match="long_delays"):
            await node.set_attributes("imports", {"max_delay_seconds": 3600})
        with pytest.raises(FeatureNotEnabled, match="message_ttl"):
            await node.send("imports", [OutgoingMessage(b"x", ttl_seconds=60)])
        with pytest.raises(FeatureNotEnabled, match="message_priorities"):
            await node.create_queue("ranked", QueueAttributes(priorities=4))
        with pytest.raises(FeatureNotEnabled, match="message_priorities"):
            await node.set_attributes("imports", {"priorities": 2})
        with pytest.raises(FeatureNotEnabled, match="message_priorities"):
            await node.send("imports", [OutgoingMessage(b"x", priority=1)])
        with pytest.raises(FeatureNotEnabled, match="rewind"):
            await node.create_queue("kept", QueueAttributes(retain_acked_seconds=60))
        with pytest.raises(FeatureNotEnabled, match="rewind"):
            await node.set_attributes("imports", {"retain_acked_seconds": 60})
        with pytest.raises(FeatureNotEnabled, match="rewind"):
            await node.rewind("imports", 0)
        assert "kept" not in await node.list_queues()
        held = await _receipts_of_layout(node, 43)  # batch_receipts off: layout 1
        with pytest.raises(FeatureNotEnabled, match="segment_read_binary"):
            await node.read_segment_data("imports", 1)  # the route then answers JSON lines
        with pytest.raises(FeatureNotEnabled, match="fair_queues"):
            await node.send("imports", [OutgoingMessage(b"x", group_id="tenant")])
        assert "retried" not in await node.list_queues()
        assert "later" not in await node.list_queues()
        attrs, _ = await node.get_queue("imports")
        assert attrs.retry is None and attrs.max_delay_seconds == 900
        assert attrs.retain_acked_seconds == 0

        rows = {r["name"]: r for r in await node.list_features()}
        assert set(rows) == features.KNOWN
        assert all(not r["enabled"] and r["missing"] == [3] for r in rows.values()), rows
        assert rows[features.QUEUE_RETIME]["supported_by"] == [1, 2]
        with pytest.raises(FeatureUnsupported, match=r"node 3 runs release 0\.1\.0"):
            await node.enable_features(None)
        with pytest.raises(InvalidParameter, match="unknown feature flag 'nope'"):
            await node.enable_features(["nope"])
        assert not node.catalog.features  # nothing was enabled

        url, stop = await serve_app(node)
        try:
            assert await asyncio.to_thread(main, ["cluster", "features", "--url", url]) == 0
            out = capsys.readouterr().out
            assert "queue_retime" in out and "1,2" in out
            code = await asyncio.to_thread(
                main, ["cluster", "enable-feature", "--all", "--url", url, "--json"]
            )
            assert code == 1 and "FeatureUnsupported" in capsys.readouterr().out

            old[0] = False  # node 3 upgraded
            code = await asyncio.to_thread(
                main, ["cluster", "enable-feature", "--all", "--url", url, "--json"]
            )
            assert code == 0
            done: dict[str, Any] = json.loads(capsys.readouterr().out)
            assert sorted(done["enabled"]) == sorted(features.KNOWN)
            code = await asyncio.to_thread(
                main, ["cluster", "enable-feature", features.QUEUE_RETIME, "--url", url]
            )
            assert code == 0 and "nothing to enable" in capsys.readouterr().out
        finally:
            await stop()
        for n in nodes.values():  # replicated: every node's catalog has them
            for _ in range(100):
                if set(n.catalog.features) == features.KNOWN:
                    break
                await asyncio.sleep(0.02)
            assert set(n.catalog.features) == features.KNOWN
        sent = await node.import_messages("imports", one, 0)
        assert [m.id for m in sent] == ["m1"]
        with pytest.raises(SegmentNotReleased):  # past the gate: the segment's own state
            await node.read_segment_data("imports", 1)
        await _retry_backs_off(node, policy)
        await _long_delays(node, long)
        await _ttl(node)
        await _priorities(node)
        await _rewind(node)
        fresh = await _receipts_of_layout(node, 59)  # batch_receipts on: one MAC per run
        acked = await node.ack("receipts", [held[0], fresh[0], held[1], fresh[1]])
        assert [r.ok for r in acked] == [True] * 4, acked  # both layouts, in one ack
        sent = await node.send("imports", [OutgoingMessage(b"t", group_id="tenant")])
        assert len(sent) == 1  # fair_queues enabled: a standard queue's group id is a tenant


async def _receipts_of_layout(node: QueueNode, length: int) -> list[str]:
    """Two messages sent to the queue ``receipts`` and received: their receipts, each
    ``length`` characters long (43: layout 1; 59: layout 2, flag ``batch_receipts``)."""
    if "receipts" not in await node.list_queues():
        await node.create_queue("receipts", QueueAttributes())
    await node.send("receipts", [OutgoingMessage(b"r1"), OutgoingMessage(b"r2")])
    got = await node.receive("receipts", 2, 60, 1)
    assert len(got) == 2 and [len(m.receipt) for m in got] == [length, length], got
    return [m.receipt for m in got]


async def _priorities(node: QueueNode) -> None:
    """With ``message_priorities`` enabled: a receive takes the highest level first; a
    priority the queue lacks is refused by name, storing nothing; the stats count each level;
    a dead-lettered message keeps its priority."""
    await node.create_queue("ranked-dlq", QueueAttributes(priorities=4))
    ranked = QueueAttributes(priorities=4, dead_letter_queue="ranked-dlq", max_receive_count=1)
    await node.create_queue("ranked", ranked)
    await node.send(
        "ranked",
        [
            OutgoingMessage(b"low"),
            OutgoingMessage(b"top", priority=3),
            OutgoingMessage(b"mid", priority=1),
        ],
    )
    with pytest.raises(InvalidParameter, match="priority"):
        await node.send("ranked", [OutgoingMessage(b"x", priority=4)])
    stats = (await node.get_queue("ranked"))[1]
    assert stats.sent_total == 3 and stats.visible_by_priority == (1, 1, 0, 1)
    got = await node.receive("ranked", 2, 30, 0)
    assert [(m.body, m.priority) for m in got] == [(b"top", 3), (b"mid", 1)]
    # Released, received again at its limit: moved to the dead-letter queue, level kept.
    await node.nack("ranked", [got[0].receipt], 0)
    again = await node.receive("ranked", 10, 30, 0)  # marks it for the dead-letter queue
    assert b"top" not in [m.body for m in again]
    for _ in range(200):
        moved = await node.receive("ranked-dlq", 1, 30, 0)
        if moved:
            break
        await asyncio.sleep(0.05)
    assert [(m.body, m.priority) for m in moved] == [(b"top", 3)]


async def _rewind(node: QueueNode) -> None:
    """With ``rewind`` enabled: an acknowledged message of a queue that keeps them comes back
    once after a rewind, through the node (the leader proposes it in parts)."""
    await node.create_queue("kept", QueueAttributes(retain_acked_seconds=60))
    await node.send("kept", [OutgoingMessage(b"once")])
    got = await node.receive("kept", 10, None, 0)
    await node.ack("kept", [m.receipt for m in got])
    assert await node.rewind("kept", 0) == 1
    assert await node.rewind("kept", 0) == 0  # its copy is live
    again = await node.receive("kept", 10, None, 0)
    assert [(m.body, m.receive_count) for m in again] == [(b"once", 1)]


async def _ttl(node: QueueNode) -> None:
    """With ``message_ttl`` enabled: a message with a 1 s time to live is not delivered after
    it and counts as expired; one beyond the queue's retention is refused by name."""
    await node.create_queue("short", QueueAttributes(message_retention_seconds=60))
    await node.send("short", [OutgoingMessage(b"soon", ttl_seconds=1), OutgoingMessage(b"keep")])
    with pytest.raises(InvalidParameter, match="ttl_seconds"):
        await node.send("short", [OutgoingMessage(b"x", ttl_seconds=61)])
    await asyncio.sleep(1.2)
    got = await node.receive("short", 10, None, 0)
    assert [m.body for m in got] == [b"keep"]
    stats = (await node.get_queue("short"))[1]
    assert stats.expired_total == 1


async def _long_delays(node: QueueNode, attrs: QueueAttributes) -> None:
    """With ``long_delays`` enabled: a queue takes delays up to its max_delay_seconds (one
    beyond is refused by name), and deliver_at (a past one: at once)."""
    assert await node.create_queue("later", attrs)
    got, _ = await node.get_queue("later")
    assert got.max_delay_seconds == 7 * 86_400
    now = node.clock_source.wall_ms()
    await node.send("later", [OutgoingMessage(b"week", delay_seconds=6 * 86_400)])
    await node.send("later", [OutgoingMessage(b"past", deliver_at_ms=now - 60_000)])
    await node.send("later", [OutgoingMessage(b"day", deliver_at_ms=now + 86_400_000)])
    with pytest.raises(InvalidParameter, match="max_delay_seconds"):
        await node.send("later", [OutgoingMessage(b"x", deliver_at_ms=now + 8 * 86_400_000)])
    with pytest.raises(InvalidParameter, match="max_delay_seconds"):
        await node.send("imports", [OutgoingMessage(b"x", delay_seconds=901)])
    got_now = await node.receive("later", 10, None, 0)
    assert [m.body for m in got_now] == [b"past"]
    stats = (await node.get_queue("later"))[1]
    assert stats.delayed == 2


async def _retry_backs_off(node: QueueNode, attrs: QueueAttributes) -> None:
    """With ``retry_backoff`` enabled: a queue with a policy of 1 s, x2 holds a message whose
    1 s lease expired for 1 s more, then for 2 s after its second receive. Asserted as lower
    bounds on when it came back (measured from before the receive that leased it), so a slow
    machine cannot fail it; the exact timing is the state machine's tests'."""
    assert await node.create_queue("retried", attrs)
    got, _ = await node.get_queue("retried")
    assert got.retry == attrs.retry
    await node.send("retried", [OutgoingMessage(b"job")])
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = await node.receive("retried", 1, None, 5)
    assert [m.receive_count for m in first] == [1]
    for count, back_off in ((1, 1.0), (2, 2.0)):
        leased_after, started = started, loop.time()
        again = await node.receive("retried", 1, None, 15)
        assert [m.receive_count for m in again] == [count + 1]
        # Leased after `leased_after`: back after its 1 s visibility and the back-off.
        assert loop.time() - leased_after >= 1.0 + back_off - 0.01, (count, loop.time())
