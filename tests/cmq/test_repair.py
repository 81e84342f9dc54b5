"""A replica whose segment files rot is found by the scrubber or by a read, and repaired from the
others without an operator; a damaged range is never served.

Three in-process nodes over the in-memory twins (`tests.cmq.helpers.Twins`), segments sealed
every few KiB. A byte of a sealed segment is flipped in one node's store (the in-memory twin of
a file that rotted); every message is then received once with its exact body, and the
replicas' digests agree again after the repair.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from cmq.errors import Unavailable
from cmq.fsm import record_check
from cmq.fsm.store import FRAME, record_times
from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.queue_node import QueueNode
from cmq.upgrade import features
from tests.cmq.helpers import Twins, configs, running, wait_until

QUEUE = "rot"
BODIES = [f"message {i:04d} ".encode() * 8 for i in range(240)]


def _configs(root: Path) -> dict[int, object]:
    return {
        nid: dataclasses.replace(cfg, segment_max_bytes=4096, scrub_rate=0)
        for nid, cfg in configs(root).items()
    }


async def _load(nodes: dict[int, QueueNode]) -> int:
    await nodes[1].create_queue(QUEUE, QueueAttributes(visibility_timeout=30))
    for i in range(0, len(BODIES), 40):
        await nodes[1].send(QUEUE, [OutgoingMessage(body=b) for b in BODIES[i : i + 40]])
    group = nodes[1].catalog.group_of(QUEUE)
    assert group is not None
    await wait_until(
        lambda: all(n.raft.groups[group].raw.raft.log.applied > 0 for n in nodes.values())
    )
    return group


def _flip_sealed(twins: Twins, nid: int, node: QueueNode, group: int) -> None:
    """Flip a byte in the middle of node ``nid``'s first sealed segment of the queue, and drop
    its read cache (a cold read must meet the damage)."""
    machine = node.machines[group]
    key, first, size = machine.sealed_segments(QUEUE)[0]
    store = machine.store
    segs = store.segments  # type: ignore[attr-defined]
    segs[(key, first)][size // 2] ^= 0x20
    store._cache.clear()  # type: ignore[attr-defined]


async def _drain(nodes: dict[int, QueueNode]) -> list[bytes]:
    """Receive (leases of 1 s: a lease whose read failed lapses soon) and ack every message,
    through every node in turn, for at most 30 s."""
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(BODIES) and time.monotonic() < deadline:
        for n in nodes.values():
            try:
                batch = await n.receive(QUEUE, 10, 1, 0)
            except Unavailable:
                await asyncio.sleep(0.05)
                continue
            if not batch:
                await asyncio.sleep(0.02)
            if batch:
                await n.ack(QUEUE, [m.receipt for m in batch])
                got.extend(m.body for m in batch)
    return got


async def _assert_replicas_identical(nodes: dict[int, QueueNode], group: int) -> None:
    """The replicas' digests (image and segment bytes) become equal once they applied the
    same index and settled (within 10 s: a divergence never does)."""
    await nodes[1].send(QUEUE, [OutgoingMessage(body=b"marker")])
    digests = []
    for _ in range(200):
        digests = [await n.group_digest(group) for n in nodes.values()]
        if len({(d.applied, d.image_sha256, d.segments_sha256) for d in digests}) == 1:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("replicas differ:\n" + "\n".join(map(repr, digests)))


async def test_the_scrubber_finds_a_rotten_segment_and_the_replica_is_repaired(
    tmp_path: Path,
) -> None:
    twins = Twins((1, 2, 3))
    async with running(_configs(tmp_path), twins) as nodes:  # type: ignore[arg-type]
        group = await _load(nodes)
        await wait_until(lambda: all(n.raft.repairs.enabled for n in nodes.values()))
        assert all(features.SELF_REPAIR in n.catalog.features for n in nodes.values())
        leader = nodes[1].raft.leader_of(group)
        victim_id = next(nid for nid in nodes if nid != leader)
        victim = nodes[victim_id]
        await wait_until(lambda: bool(victim.machines[group].sealed_segments(QUEUE)))
        _flip_sealed(twins, victim_id, victim, group)
        await victim.scrubber.scrub_pass()
        assert victim.scrubber.stats().findings == 1
        await wait_until(lambda: victim.raft.repairs.completed == 1, timeout=30)
        await wait_until(lambda: not victim.raft.repairs.stats().under_repair)
        # The repaired replica holds the segment again, intact: a second pass finds nothing.
        await victim.scrubber.scrub_pass()
        assert victim.scrubber.stats().findings == 1
        assert sorted(await _drain(nodes)) == sorted(BODIES)
        await _assert_replicas_identical(nodes, group)


async def test_a_segment_gone_since_the_pass_listed_it_is_not_damage(tmp_path: Path) -> None:
    """A pass lists the sealed segments once; one archived (or released) meanwhile has its file
    removed after the next snapshot. Reading it then finds no file: that is not damage, and no
    replica may be reset for it (all three were, once, in an archive benchmark)."""
    twins = Twins((1, 2, 3))
    async with running(_configs(tmp_path), twins) as nodes:  # type: ignore[arg-type]
        group = await _load(nodes)
        await wait_until(lambda: all(n.raft.repairs.enabled for n in nodes.values()))
        node = nodes[2]
        await wait_until(lambda: bool(node.machines[group].sealed_segments(QUEUE)))
        key, _, size = node.machines[group].sealed_segments(QUEUE)[0]
        gone = (key, 10**9, size)  # listed when the pass began, its file removed since
        listed = node.scrubber._sealed
        calls = [0]

        def stale_once(machine: object) -> list[tuple[str, int, int]]:
            calls[0] += 1
            now = listed(machine)  # type: ignore[arg-type]
            return [gone, *now] if calls[0] == 1 else now

        node.scrubber._sealed = stale_once  # type: ignore[method-assign]
        await node.scrubber.scrub_pass()
        assert node.scrubber.stats().findings == 0
        assert calls[0] >= 2  # the missing file was checked against the current listing
        assert node.raft.repairs.completed == 0 and not node.raft.repairs.stats().under_repair


def _skip_checksums(
    where: str, offset: int, data: memoryview, seq: int
) -> tuple[memoryview, tuple[int, int, int]]:
    """Planted bug: a store that trusts what it reads (no checksum, no seq check)."""
    length, _ = FRAME.unpack_from(data, 0)
    payload = data[FRAME.size : FRAME.size + length]
    return payload, record_times(payload)


@pytest.mark.parametrize("planted", [False, True], ids=["checked", "planted-no-checksum"])
async def test_a_damaged_read_on_the_leader_is_never_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: bool
) -> None:
    if planted:
        monkeypatch.setattr(record_check, "check_frame", _skip_checksums)
    twins = Twins((1, 2, 3))
    async with running(_configs(tmp_path), twins) as nodes:  # type: ignore[arg-type]
        group = await _load(nodes)
        await wait_until(lambda: all(n.raft.repairs.enabled for n in nodes.values()))
        leader_id = nodes[1].raft.leader_of(group)
        leader = nodes[leader_id]
        await wait_until(lambda: bool(leader.machines[group].sealed_segments(QUEUE)))
        _flip_sealed(twins, leader_id, leader, group)
        got = await _drain(nodes)
        if planted:
            # The check below catches a store that serves the damaged copy.
            assert sorted(got) != sorted(BODIES)
            return
        # Every body exactly as sent, each once: the damaged copy was never read out.
        assert sorted(got) == sorted(BODIES)
        assert leader.raft.repairs.started == 1
        await wait_until(lambda: leader.raft.repairs.completed == 1, timeout=30)
        await _assert_replicas_identical(nodes, group)
