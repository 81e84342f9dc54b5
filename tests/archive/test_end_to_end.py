"""The archive against a real 3-node cluster (``cmq serve`` processes on loopback): a queue with
``archive=true`` and small segments gets 20,000 messages; most are received and acked, some are
dead-lettered (nacked until ``max_receive_count``), some expire (sent with a time to live
shorter than their delay, so never delivered). Then ``cmq archive`` runs (a real ``local[2]``
Spark job), and the Parquet is read back with pyarrow: every deleted message exactly once, its body
byte-identical, its outcome right, the manifest's counts matching; no replica holds a file of an
archived segment any more; a second run archives nothing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmq.client import Client, Message
from cmq.errors import CmqError
from tests.archive.conftest import NEEDS_JAVA
from tests.archive.output import manifests, rows
from tests.cmq.cluster import CmqCluster, request, unique_queue

pytestmark = [pytest.mark.slow, NEEDS_JAVA]

TOTAL = 20_000
EXPIRE = 300  # sent with a time to live shorter than their delay: expire unseen
DEAD = 200  # nacked until max_receive_count: dead-lettered
SEGMENT_BYTES = 65_536
SEGMENT_AGE_S = 2
RETENTION_S = 3600  # every acked message is acked well within it, however slow the machine
EXPIRE_DELAY_S, EXPIRE_TTL_S = 5, 2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[CmqCluster]:
    (tmp_path / "cluster").mkdir()
    c = CmqCluster(tmp_path / "cluster", n=3, groups=1)
    c.configure(segment_max_bytes=SEGMENT_BYTES, segment_max_age=SEGMENT_AGE_S)
    try:
        c.start_all()
        yield c
    finally:
        c.stop_all()


async def produce(client: Client, queue: str) -> dict[str, dict[str, Any]]:
    """Send every message; body -> {id, seq, outcome expected}."""
    expect: dict[str, dict[str, Any]] = {}

    async def send(bodies: list[str], delay: int | None, ttl: int | None = None) -> None:
        msgs = [
            Message(b, delay_seconds=delay, ttl_seconds=ttl, attributes={"n": b}) for b in bodies
        ]
        for b, sent in zip(bodies, await client.send(queue, msgs), strict=True):
            kind = {"x": "expired", "d": "dead_lettered"}.get(b[0], "acked")
            expect[b] = {"id": sent.id, "seq": sent.seq, "outcome": kind}

    # Delayed past their time to live: never visible, deleted as expired.
    for i in range(0, EXPIRE, 100):
        await send([f"x-{k}" for k in range(i, min(i + 100, EXPIRE))], EXPIRE_DELAY_S, EXPIRE_TTL_S)
    rest = [f"d-{k}" for k in range(DEAD)] + [f"a-{k}" for k in range(TOTAL - EXPIRE - DEAD)]
    batches = [rest[i : i + 100] for i in range(0, len(rest), 100)]
    sem = asyncio.Semaphore(8)

    async def one(b: list[str]) -> None:
        async with sem:
            await send(b, None)

    await asyncio.gather(*(one(b) for b in batches))
    return expect


async def consume(client: Client, queue: str, deadline: float) -> None:
    """Ack the ``a-`` messages, nack the ``d-`` ones (dead-lettered at their 2nd receive) until
    the queue reports everything deleted."""

    async def worker() -> None:
        while time.monotonic() < deadline:
            try:
                msgs = await client.receive(queue, 100, wait_seconds=1, visibility_timeout=60)
            except CmqError:
                await asyncio.sleep(0.1)
                continue
            if not msgs:
                return
            acks = [m.receipt for m in msgs if str(m.body).startswith("a-")]
            nacks = [m.receipt for m in msgs if str(m.body).startswith("d-")]
            if acks:
                await client.ack(queue, acks)
            if nacks:
                await client.nack(queue, nacks)

    await asyncio.gather(*(worker() for _ in range(4)))


async def wait_deleted(client: Client, queue: str, deadline: float) -> Any:
    while True:
        st = (await client.get_queue(queue)).stats
        done = st.acked_total + st.dead_lettered_total + st.expired_total
        if done == TOTAL and st.visible == st.in_flight == st.delayed == 0:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"not every message left the queue: {st}")
        if st.visible:
            await consume(client, queue, deadline)
        await asyncio.sleep(0.5)


def released_count(url: str, queue: str) -> tuple[int, list[dict[str, Any]]]:
    status, listing = request(url, "GET", f"/v1/queues/{queue}/segments?state=all", None)
    assert status == 200, listing
    segs = listing["segments"]
    return sum(s["count"] for s in segs if s["state"] == "released"), segs


def run_archive(urls: list[str], out: Path, queue: str) -> tuple[str, float]:
    start = time.monotonic()
    args = ["--url", ",".join(urls), "--out", str(out), "--queue", queue, "--json"]
    got = subprocess.run(
        [sys.executable, "-m", "cmq", "archive", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert got.returncode == 0, got.stdout + got.stderr[-4000:]
    return got.stdout, time.monotonic() - start


def test_archive_of_a_real_cluster(cluster: CmqCluster, tmp_path: Path) -> None:
    queue, dlq = unique_queue("archived"), unique_queue("archived-dlq")
    url = cluster.urls[0]
    attrs = {
        "archive": True,
        "message_retention_seconds": RETENTION_S,
        "dead_letter_queue": dlq,
        "max_receive_count": 2,
    }

    async def setup() -> None:
        async with Client(cluster.urls, timeout=30) as client:
            await client.create_queue(dlq)
            await client.create_queue(queue, attrs)

    asyncio.run(setup())

    async def load() -> dict[str, dict[str, Any]]:
        async with Client(cluster.urls, timeout=30) as client:
            start = time.monotonic()
            expect = await produce(client, queue)
            await consume(client, queue, start + 240)
            await wait_deleted(client, queue, start + 240)
            return expect

    t0 = time.monotonic()
    expect = asyncio.run(load())
    load_s = time.monotonic() - t0
    deadline = time.monotonic() + 60
    while (got := released_count(url, queue))[0] < TOTAL and time.monotonic() < deadline:
        time.sleep(0.5)
    released, segments = got
    assert released == TOTAL, f"released {released} of {TOTAL}; segments: {segments}"

    def files(first: int) -> list[Path]:
        """The files of segment ``first`` on every replica."""
        return list((tmp_path / "cluster").glob(f"node*/segments/*/{queue}.*/{first:020d}.seg"))

    released_firsts = [s["first_seq"] for s in segments if s["state"] == "released"]
    assert all(files(f) for f in released_firsts), "released segments are kept until archived"

    out = tmp_path / "archive"
    stdout, archive_s = run_archive(cluster.urls, out, queue)
    summary = json.loads(stdout)
    got_rows = rows(out)
    assert summary["rows"] == len(got_rows) == TOTAL, summary
    seqs = Counter(int(r["seq"]) for r in got_rows)
    assert max(seqs.values()) == 1, "a record archived twice"
    by_body = {str(r["body"].decode()): r for r in got_rows}
    assert set(by_body) == set(expect)
    for body, want in expect.items():
        r = by_body[body]
        assert (r["id"], r["outcome"]) == (want["id"], want["outcome"])
        # A message still live in an old sparse segment was copied forward under a new seq.
        assert r["seq"] >= want["seq"]
        assert dict(r["attributes"]) == {"n": body} and r["queue"] == queue
    assert Counter(r["outcome"] for r in got_rows) == {
        "acked": TOTAL - EXPIRE - DEAD,
        "expired": EXPIRE,
        "dead_lettered": DEAD,
    }
    (m,) = manifests(out)
    assert m["rows"] == TOTAL and sum(s["count"] for s in m["segments"]) == TOTAL
    assert sorted(s["first_seq"] for s in m["segments"]) == sorted(released_firsts)
    for s in m["segments"]:
        n = sum(1 for r in got_rows if s["first_seq"] <= r["seq"] <= s["last_seq"])
        assert n == s["rows"] == s["count"]

    # Every replica deletes an archived segment's files once a snapshot recorded the archive
    # (housekeeping asks for one while files await removal): within seconds.
    deadline = time.monotonic() + 60
    while any(files(f) for f in released_firsts) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for f in released_firsts for p in files(f)]
    assert released_count(url, queue)[0] == 0

    again = json.loads(run_archive(cluster.urls, out, queue)[0])
    assert (again["segments"], again["rows"]) == (0, 0)
    assert len(manifests(out)) == 1 and len(rows(out)) == TOTAL
    mb = sum(len(r["body"]) for r in got_rows) / 1e6
    work = summary["seconds"] - summary["spark_seconds"]
    print(
        f"\nend-to-end: load {load_s:.1f} s; archive of {TOTAL} rows ({len(m['segments'])} "
        f"segments, {summary['source_bytes'] / 1e6:.2f} MB of segments, {mb:.2f} MB of bodies): "
        f"{archive_s:.1f} s for the command, {summary['spark_seconds']:.1f} s of it starting "
        f"Spark, {work:.1f} s of work: {TOTAL / work:,.0f} rows/s, "
        f"{summary['source_bytes'] / 1e6 / work:.2f} MB/s of segments"
    )
