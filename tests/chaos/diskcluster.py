"""A cmq cluster whose nodes' data directories can live on LazyFS mounts (power loss: every
write not fsynced is forgotten), and the checks the power-loss and file-fault tests share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cmq.client import NO_RETRY, Client, SyncClient
from cmq.errors import CmqError
from tests.chaos.cluster import serve_command
from tests.chaos.lazyfs import LazyFS
from tests.cmq.cluster import CmqCluster, request

LONG = os.environ.get("CHAOS_LONG") == "1"


class DiskCluster(CmqCluster):
    """A `CmqCluster` whose nodes may have their data directory on a LazyFS mount and may run
    with other snapshot options. ``data_dir(n)`` is what the node sees; ``disk_dir(n)`` is
    where the bytes are (the LazyFS backing directory, or the data directory itself)."""

    def __init__(
        self,
        root: Path,
        *,
        lazy: bool,
        groups: int = 1,
        group_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(root, n=3, groups=groups)
        self.nodes.command = serve_command(group_options)
        self.fs: dict[int, LazyFS] = {}
        if lazy:
            for nid in self.settings:
                fs = LazyFS(root / f"node{nid}.disk", self.data_dir(nid))
                fs.start()
                self.fs[nid] = fs

    def data_dir(self, nid: int) -> Path:
        return self.root / f"node{nid}"

    def disk_dir(self, nid: int) -> Path:
        return self.fs[nid].backing if nid in self.fs else self.data_dir(nid)

    def log(self, nid: int) -> str:
        return (self.root / f"node{nid}.log").read_text(errors="replace")

    def kill_all_at_once(self) -> list[int]:
        """SIGKILL every node before waiting for any (a coordinated power loss)."""
        return self.nodes.kill_all()

    def power_loss(self, nid: int, torn_seed: int | None = None) -> dict[str, Any]:
        """SIGKILL node ``nid`` and drop what its disk had not made durable (with
        ``torn_seed``: keeping a random prefix of each file's unsynced appends)."""
        self.kill(nid)
        return self.fs[nid].drop_unsynced(torn_seed)

    def leader_of(self, queue: str, timeout: float = 15) -> int:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.leader_node_of_queue(queue)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        self.stop_all()
        for fs in self.fs.values():
            fs.stop()


def assert_no_stopped_groups(c: DiskCluster) -> None:
    for nid in c.settings:
        log = c.log(nid)
        for bad in ("stopped:", "InvariantBroken", "CorruptRecord", "commit beyond"):
            assert bad not in log, f"node {nid}: {bad!r} in its log:\n{log[-3000:]}"


# Small snapshot intervals: several snapshots and compactions during the run.
SNAPSHOTS = {"snapshot_entries": 60, "keep_entries": 20}


async def create_queue(c: CmqCluster, name: str) -> None:
    async with Client(c.http[1]) as client:
        await client.create_queue(name, {"visibility_timeout": 3})


def caught_up(c: CmqCluster, nid: int, group: int = 1) -> bool:
    """Node ``nid`` follows a leader of ``group`` and has applied what that leader committed."""
    with SyncClient(c.http[nid], timeout=10, retry=NO_RETRY) as client:
        try:
            st = client.status()
        except CmqError:
            return False
        g = st["groups"].get(str(group), {})
        leader = g.get("leader")
        if not leader or leader not in c.procs:
            return False
        if leader == nid:  # it may win an election after its restart: caught up with itself
            return bool(g.get("applied", -1) >= g.get("commit", 0) > 0)
    with SyncClient(c.http[leader], timeout=10, retry=NO_RETRY) as client:
        try:
            lst = client.status()
        except CmqError:
            return False
    return bool(g.get("applied", -1) >= lst["groups"][str(group)]["commit"])


def group_of(c: CmqCluster, queue: str) -> int:
    """The data group holding ``queue`` (from any live node's status)."""
    for nid in sorted(c.procs):
        with SyncClient(c.http[nid], timeout=10, retry=NO_RETRY) as client:
            try:
                return int(client.status()["placement"][queue])
            except (CmqError, KeyError):
                continue
    raise AssertionError(f"no node knows where {queue} is")


def wait_caught_up(c: CmqCluster, nid: int, timeout: float = 30, group: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while not caught_up(c, nid, group):
        if nid in c.procs and c.procs[nid].poll() is not None:
            raise AssertionError(f"node {nid} exited; see {c.root}")
        assert time.monotonic() < deadline, f"node {nid} did not catch up; see {c.root}"
        time.sleep(0.2)


def same_digests(c: DiskCluster, groups: tuple[int, ...], timeout: float = 30.0) -> None:
    """Every node's digest of each data group is the same (polled: replicas settle)."""
    deadline = time.monotonic() + timeout
    seen: dict[int, set[tuple[Any, ...]]] = {}
    while time.monotonic() < deadline:
        seen = {}
        for g in groups:
            for n in sorted(c.procs):
                status, d = request(c.http[n], "GET", f"/v1/groups/{g}/digest")
                key = (
                    (d["applied"], d["image_sha256"], d["segments_sha256"])
                    if status == 200
                    else ("no answer", n)
                )
                seen.setdefault(g, set()).add(key)
        if all(len(v) == 1 for v in seen.values()):
            return
        time.sleep(0.3)
    raise AssertionError(f"replicas differ: {seen}")


async def wait_ready(c: DiskCluster) -> None:
    await asyncio.to_thread(c.wait_ready, 60)


@contextlib.contextmanager
def started(root: Path, **settings: Any) -> Iterator[DiskCluster]:
    """A started `DiskCluster` under ``root`` (no LazyFS unless ``lazy=True``; snapshots often),
    closed on exit: the cluster the file-fault tests share."""
    settings.setdefault("lazy", False)
    settings.setdefault("group_options", SNAPSHOTS)
    c = DiskCluster(root, **settings)
    try:
        c.start_all()
        yield c
    finally:
        c.close()
