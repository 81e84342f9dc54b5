"""``cmq backup`` and ``cmq restore`` as commands against real ``cmq serve`` processes: a
three-node cluster loaded (a dead-letter queue, a FIFO queue, messages in flight and delayed),
backed up with the CLI (exports forwarded to each queue's leader), restored with the CLI into
a fresh one-node cluster and compared."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmq.client import Client
from tests.cmq.backup_helpers import differences, load, snapshot
from tests.cmq.cluster import CmqCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[CmqCluster, CmqCluster]]:
    source = CmqCluster(tmp_path / "source", n=3, groups=2)
    target = CmqCluster(tmp_path / "target", n=1, groups=1)
    (tmp_path / "source").mkdir()
    (tmp_path / "target").mkdir()
    try:
        source.start_all()
        target.start_all()
        yield source, target
    finally:
        source.stop_all()
        target.stop_all()


def _cmq(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "cmq", *args, "--json"],
        check=False,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode() + done.stdout.decode()
    out: dict[str, object] = json.loads(done.stdout)
    return out


async def test_backup_and_restore_between_two_clusters(
    clusters: tuple[CmqCluster, CmqCluster], tmp_path: Path
) -> None:
    source, target = clusters
    async with Client(source.urls) as a:
        await load(a)
        before = await snapshot(a)
    out = tmp_path / "backup"
    # Through node 3: the exports of queues it does not lead are forwarded.
    wrote = await asyncio.to_thread(_cmq, "backup", "--url", source.urls[2], "--out", str(out))
    assert wrote["queues"] == 4
    did = await asyncio.to_thread(_cmq, "restore", str(out), "--url", target.urls[0])
    assert did["messages_imported"] == wrote["messages"]
    async with Client(target.urls) as b:
        after = await snapshot(b)
        assert differences(before, after) == []
        stats = (await b.get_queue("jobs.fifo")).stats
        assert stats.in_flight == 0 and stats.visible == 12
    again = await asyncio.to_thread(_cmq, "restore", str(out), "--url", target.urls[0])
    assert again["messages_imported"] == 0
