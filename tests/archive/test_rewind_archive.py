"""The archive and rewinds (no Spark): against a real in-process one-node cluster, the
archive job's own read path (`cmq.archive.remote.ClusterClient` lists, claims and marks;
`cmq.archive.records.read_segment` streams and verifies each released segment) archives every
acknowledged message exactly once although a rewind delivered them all again and their copies
were acknowledged too; segments the archive is done with stay for rewinds while
``retain_acked_seconds`` keeps them, and are never offered to the archive again."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from api.app import make_app
from cmq.archive.records import SegmentTask, read_segment
from cmq.archive.remote import ClusterClient
from cmq.client import Client
from tests.cmq.helpers import one_node

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    # Segments sealed after 0.5 s (housekeeping's Tidy every 0.1 s): acked ones release soon.
    async with one_node(tmp_path / "n1", 0.1, segment_max_age=0.5) as node:
        server = TestServer(make_app(node))
        await server.start_server()
        try:
            yield str(server.make_url("")).rstrip("/")
        finally:
            await server.close()


def archive_round(url: str, queue: str, batch: str) -> list[tuple[str, str]]:
    """What one archive run does: claim every released segment, read each one verified, mark
    them archived; the (id, outcome) of every record it stored."""
    cluster = ClusterClient([url])
    listing = cluster.segments(queue, "released")
    firsts = [s.first_seq for s in listing.segments]
    if not firsts:
        return []
    claimed = cluster.claim(queue, batch, firsts, 60_000)
    assert not claimed.refused, claimed
    out: list[tuple[str, str]] = []
    for s in listing.segments:
        task = SegmentTask(queue, s.first_seq, s.last_seq, s.count, s.checksum, (url,))
        table = read_segment(task).table
        ids, outcomes = table.column("id").to_pylist(), table.column("outcome").to_pylist()
        out += list(zip(ids, outcomes, strict=True))
    marked = cluster.mark_archived(queue, batch, firsts)
    assert sorted(marked.archived) == sorted(firsts), marked
    return out


async def wait_released(c: Client, queue: str) -> None:
    """Until nothing but released (or kept) segments are left, but the active one."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        listing = await c.list_segments(queue, "all")
        states = [s.state for s in listing.segments]
        if "sealed" not in states and states.count("active") <= 1:
            return
        assert asyncio.get_running_loop().time() < deadline, states
        await asyncio.sleep(0.1)


async def consume(c: Client, queue: str, n: int) -> list[str]:
    got = await c.receive(queue, 10, wait_seconds=5)
    assert len(got) == n, [m.body for m in got]
    await c.ack(queue, [m.receipt for m in got])
    return sorted(m.id for m in got)


async def test_a_rewound_message_is_archived_once(url: str) -> None:
    queue = "kept"
    async with Client(url) as c:
        await c.create_queue(queue, {"archive": True, "retain_acked_seconds": 3600})
        since = datetime.now(UTC) - timedelta(seconds=5)
        sent = await c.send(queue, [f"m{i}" for i in range(5)])
        ids = sorted(m.id for m in sent)
        assert await consume(c, queue, 5) == ids
        assert await c.rewind(queue, since) == 5
        assert await consume(c, queue, 5) == ids  # the copies, acked in turn
        await asyncio.sleep(0.6)  # the copies' segment is older than the segment age
        await c.send(queue, ["later"])  # a new active segment: the others seal
        later = await consume(c, queue, 1)
        await wait_released(c, queue)
        archived = await asyncio.to_thread(archive_round, url, queue, "b-1")
        counts = Counter(mid for mid, _ in archived)
        assert set(ids) <= set(counts) <= {*ids, *later}  # "later"'s segment may be active
        assert all(n == 1 for n in counts.values()), counts  # never twice
        assert {outcome for _, outcome in archived} == {"acked"}
        # Archived but kept for rewinds: not released any more, so no archive run sees them.
        listing = await c.list_segments(queue, "all")
        assert "released" not in {s.state for s in listing.segments}
        kept = await c.list_segments(queue, "archived_pending")
        assert kept.segments
        # They still serve a rewind; the copies' acks give the archive nothing new.
        assert await c.rewind(queue, since) == 6
        assert sorted(await consume(c, queue, 6)) == sorted([*ids, *later])
        await asyncio.sleep(0.6)
        await c.send(queue, ["last"])
        last = await consume(c, queue, 1)
        await wait_released(c, queue)
        archived += await asyncio.to_thread(archive_round, url, queue, "b-2")
        counts = Counter(mid for mid, _ in archived)
        # Over both runs: every message once ("last" is in the active segment), no copy.
        assert counts == Counter([*ids, *later]), counts
        assert last[0] not in counts
