"""Per-entry sends and the one queue-to-queue move (`cmq.redrive`) on a one-node cluster in
process: a refused message is answered in its place while the others are stored; the dead-letter
move and a lease-based move copy what the destination takes and leave the rest in the source."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cmq.errors import InvalidParameter, MessageTooLarge, MissingParameter
from cmq.model import OutgoingMessage, QueueAttributes, SendRefused, SentMessage, send_refusal
from cmq.redrive import REDRIVE_GROUP, Moving, copies, move_batch
from tests.cmq.helpers import one_node

FIFO = QueueAttributes(fifo=True)


def test_send_refusals_follow_the_queue_and_its_attributes() -> None:
    small = QueueAttributes(max_message_size=1024)
    assert send_refusal("q", OutgoingMessage(b"x" * 1024), small) is None
    assert isinstance(send_refusal("q", OutgoingMessage(b"x" * 1025), small), MessageTooLarge)
    assert send_refusal("q", OutgoingMessage(b"x", group_id="g"), small) is None  # a tenant
    ranked = QueueAttributes(priorities=2)
    assert isinstance(
        send_refusal("q", OutgoingMessage(b"x", group_id="g", priority=1), ranked), InvalidParameter
    )
    no_group = send_refusal("q.fifo", OutgoingMessage(b"x", dedup_id="d"), FIFO)
    assert isinstance(no_group, MissingParameter)
    no_dedup = send_refusal("q.fifo", OutgoingMessage(b"x", group_id="g"), FIFO)
    assert (
        isinstance(no_dedup, InvalidParameter) and "ContentBasedDeduplication" in no_dedup.message
    )
    content = QueueAttributes(fifo=True, content_based_deduplication=True)
    assert send_refusal("q.fifo", OutgoingMessage(b"x", group_id="g"), content) is None


def test_copies_keep_the_message_and_are_deduplicated_by_origin() -> None:
    m = Moving("id-1", b"\x00", True, (("k", "v"),), "g")
    (standard,) = copies("q", [m], "dlq:src")
    assert standard == OutgoingMessage(b"\x00", True, 0, (("k", "v"),), "dlq:src:id-1", None)
    (fifo,) = copies("q.fifo", [m], "move")
    assert (fifo.delay_seconds, fifo.group_id, fifo.dedup_id) == (None, "g", "move:id-1")
    assert copies("q.fifo", [Moving("id-2", b"", False, ())], "move")[0].group_id == REDRIVE_GROUP
    assert copies("q", [Moving("x" * 200, b"", False, ())], "move")[0].dedup_id == (
        "move:" + "x" * 123
    )


async def test_a_per_entry_send_refuses_each_message_alone(tmp_path: Path) -> None:
    async with one_node(tmp_path, housekeeping_interval=60) as node:
        await node.create_queue("small", QueueAttributes(max_message_size=1024))
        big, ok = OutgoingMessage(b"x" * 1025), OutgoingMessage(b"ok")
        with pytest.raises(MessageTooLarge):  # a whole send is refused by any message
            await node.send("small", [ok, big])
        got = await node.send_each("small", [big, ok, big])
        assert [type(g) for g in got] == [SendRefused, SentMessage, SendRefused]
        assert isinstance(got[0], SendRefused) and got[0].code == "MessageTooLarge"
        assert isinstance(got[0].error(), MessageTooLarge)
        assert [m.body for m in await node.receive("small", 10, 30, 0)] == [b"ok"]
        assert await node.send_each("small", [big]) == [
            SendRefused.of(MessageTooLarge("a message body has 1025 bytes; the queue allows 1024"))
        ]
        _, stats = await node.get_queue("small")
        assert stats.sent_total == 1

        await node.create_queue("f.fifo", FIFO)
        a = OutgoingMessage(b"a", group_id="g")
        b = OutgoingMessage(b"b", group_id="g", dedup_id="d")
        fifo = await node.send_each("f.fifo", [a, b])
        assert isinstance(fifo[0], SendRefused) and fifo[0].code == "InvalidParameter"
        assert isinstance(fifo[1], SentMessage)


async def test_a_move_leaves_what_the_destination_refuses(tmp_path: Path) -> None:
    async with one_node(tmp_path, housekeeping_interval=60) as node:
        await node.create_queue("src", QueueAttributes())
        await node.create_queue("dst.fifo", QueueAttributes(fifo=True, max_message_size=1024))
        await node.send("src", [OutgoingMessage(b"one"), OutgoingMessage(b"x" * 2000)])
        first = await move_batch(node, "src", "dst.fifo", 10, lease_seconds=60, origin="move")
        assert first.moved == 1 and [r.code for r in first.refused] == ["MessageTooLarge"]
        [moved] = await node.receive("dst.fifo", 10, 30, 0)
        assert (moved.body, moved.group_id) == (b"one", REDRIVE_GROUP)
        assert moved.dedup_id is not None and moved.dedup_id.startswith("move:")
        _, stats = await node.get_queue("src")  # the refused one is visible again at once
        assert (stats.visible, stats.in_flight, stats.acked_total) == (1, 0, 1)
        await node.purge("src")
        assert (await move_batch(node, "src", "dst.fifo", 10, lease_seconds=60, origin="m")).done


async def test_the_dead_letter_move_keeps_what_the_dead_letter_queue_refuses(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path, housekeeping_interval=0.05) as node:
        await node.create_queue("dlq", QueueAttributes(max_message_size=1024))
        attrs = QueueAttributes(visibility_timeout=0, dead_letter_queue="dlq", max_receive_count=1)
        await node.create_queue("work", attrs)
        await node.send("work", [OutgoingMessage(b"small"), OutgoingMessage(b"x" * 2000)])
        assert len(await node.receive("work", 10, None, 0)) == 2
        assert await node.receive("work", 10, None, 0) == []  # both marked for the DLQ
        [moved] = await node.receive("dlq", 10, 30, 5)
        assert moved.body == b"small"
        await asyncio.sleep(0.5)  # more housekeeping rounds: the big one stays, marked
        _, stats = await node.get_queue("work")
        assert (stats.dead_lettered_total, stats.visible, stats.acked_total) == (1, 0, 0)
        assert await node.receive("work", 10, None, 0) == []  # still marked, not delivered
        assert await node.receive("dlq", 10, 30, 0) == []


async def test_a_receive_that_dead_letters_a_fifo_head_delivers_the_next_of_its_group(
    tmp_path: Path,
) -> None:
    # Housekeeping is slow here: only the receive's own move can unblock the group at once.
    async with one_node(tmp_path, housekeeping_interval=60) as node:
        await node.create_queue("dlq.fifo", QueueAttributes(fifo=True))
        attrs = QueueAttributes(
            fifo=True,
            content_based_deduplication=True,
            visibility_timeout=0,
            dead_letter_queue="dlq.fifo",
            max_receive_count=1,
        )
        await node.create_queue("work.fifo", attrs)
        sends = [OutgoingMessage(b, group_id="g") for b in (b"poison", b"next", b"last")]
        await node.send("work.fifo", sends)
        [first] = await node.receive("work.fifo", 1, None, 0)
        assert first.body == b"poison"
        # This receive finds the head at its receive limit: it moves it to the dead-letter
        # queue and answers with the group's next messages, in order, at once.
        got = await node.receive("work.fifo", 10, 30, 0)
        assert [m.body for m in got] == [b"next", b"last"]
        [moved] = await node.receive("dlq.fifo", 10, 30, 0)
        assert (moved.body, moved.group_id) == (b"poison", "g")
        _, stats = await node.get_queue("work.fifo")
        assert stats.dead_lettered_total == 1
