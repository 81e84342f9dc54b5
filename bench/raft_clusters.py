"""The two 3-node loopback clusters `raftlog_bench.py` measures, and one measurement of either
(`Measurement`: committed proposals, seconds, the worst leader's p50/p99, WAL records and
fsyncs summed over the nodes):

- `RaftlogCluster`: 3 ``tests.raftlog.harness.node`` processes with G groups, the load generated
  inside each leader process (``POST /bench``);
- `PysyncobjCluster`: 3 ``bench/pysyncobj_node.py`` processes with G `SyncObj` instances each,
  ``stock`` or ``msync``, driven by JSON lines on their stdin the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from cmq.cli.launch import free_ports  # noqa: E402
from tests.raftlog.harness.localcluster import (  # noqa: E402
    ProcCluster,
    get_json,
    leaders,
    wait_ready,
)

PAYLOAD = 1024


@dataclass
class Measurement:
    """One timed load run on one cluster."""

    per_group: int
    groups: int
    committed: int
    seconds: float
    p50: float | None
    p99: float | None
    records: int
    fsyncs: int
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.committed / self.seconds if self.seconds > 0 else 0.0

    @property
    def concurrency(self) -> int:
        return self.per_group * self.groups

    @property
    def records_per_fsync(self) -> float | None:
        return self.records / self.fsyncs if self.fsyncs else None

    @property
    def proposals_per_fsync(self) -> float | None:
        return 3 * self.committed / self.fsyncs if self.fsyncs else None


def combine(per_group: int, groups: int, parts: list[dict[str, Any]], wal: tuple[int, int]):
    """Sum per-node ``/bench`` replies. Latency percentiles cannot be merged from per-node
    summaries, so with several leader nodes the worst node's p50/p99 is reported."""
    errors: dict[str, int] = {}
    for part in parts:
        for k, v in (part.get("errors") or {}).items():
            errors[k] = errors.get(k, 0) + int(v)
    p50s = [p["p50"] for p in parts if p.get("p50") is not None]
    p99s = [p["p99"] for p in parts if p.get("p99") is not None]
    return Measurement(
        per_group=per_group,
        groups=groups,
        committed=sum(int(p["committed"]) for p in parts),
        seconds=max(float(p["seconds"]) for p in parts),
        p50=max(p50s) if p50s else None,
        p99=max(p99s) if p99s else None,
        records=wal[0],
        fsyncs=wal[1],
        errors=errors,
    )


# --------------------------------------------------------------------------- raftlog


class RaftlogCluster:
    """3 ``tests.raftlog.harness.node`` processes with G groups, driven over their control API."""

    def __init__(self, root: Path, groups: int) -> None:
        self.groups = groups
        self.cluster = ProcCluster(root, n=3, groups=groups, state_machine="checksum")
        self.loop = asyncio.new_event_loop()
        self.session: aiohttp.ClientSession | None = None

    def __enter__(self) -> RaftlogCluster:
        try:
            self.cluster.start_all()
            self.loop.run_until_complete(self._start())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _start(self) -> None:
        self.session = aiohttp.ClientSession()
        await wait_ready(self.session, self.cluster, timeout=60)

    def close(self) -> None:
        self.cluster.stop_all()
        if self.session is not None:
            self.loop.run_until_complete(self.session.close())
            self.session = None
        self.loop.close()

    def measure(self, per_group: int, seconds: float) -> Measurement:
        task = self.loop.create_task(self._measure(per_group, seconds))
        try:
            return self.loop.run_until_complete(task)
        except BaseException:  # Ctrl-C included: don't leave the request task dangling
            task.cancel()
            with contextlib.suppress(BaseException):
                self.loop.run_until_complete(task)
            raise

    async def _wal_totals(self) -> tuple[int, int]:
        assert self.session is not None
        records = fsyncs = 0
        for nid in sorted(self.cluster.procs):
            st = await get_json(self.session, self.cluster.http[nid] + "/stats")
            if st is None:
                raise RuntimeError(f"raftlog node {nid} did not answer /stats")
            for w in st["wal"]:
                records += int(w["records"])
                fsyncs += int(w["fsyncs"])
        return records, fsyncs

    async def _measure(self, per_group: int, seconds: float) -> Measurement:
        assert self.session is not None
        led = await leaders(self.session, self.cluster)
        if len(led) != self.groups:
            raise RuntimeError(f"raftlog: only {len(led)}/{self.groups} groups have a leader")
        by_node: dict[int, list[int]] = {}
        for gid, nid in led.items():
            by_node.setdefault(nid, []).append(gid)
        before = await self._wal_totals()
        timeout = aiohttp.ClientTimeout(total=seconds + 120)

        async def one(nid: int, gids: list[int]) -> dict[str, Any]:
            assert self.session is not None
            spec = {"groups": gids, "concurrency": per_group, "seconds": seconds, "size": PAYLOAD}
            url = self.cluster.http[nid] + "/bench"
            async with self.session.post(url, data=json.dumps(spec), timeout=timeout) as r:
                r.raise_for_status()
                data: dict[str, Any] = await r.json()
                return data

        parts = await asyncio.gather(*(one(n, g) for n, g in sorted(by_node.items())))
        after = await self._wal_totals()
        wal = (after[0] - before[0], after[1] - before[1])
        return combine(per_group, self.groups, list(parts), wal)


# --------------------------------------------------------------------------- pysyncobj


class PysyncobjCluster:
    """3 ``bench/pysyncobj_node.py`` processes, each with G `SyncObj` instances."""

    def __init__(self, root: Path, groups: int, mode: str) -> None:
        self.root = root
        self.groups = groups
        self.mode = mode
        self.procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> PysyncobjCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        ports = ",".join(str(p) for p in free_ports(3 * self.groups))
        script = Path(__file__).resolve().parent / "pysyncobj_node.py"
        for i in range(3):
            log = open(self.root / f"p{i}.log", "ab")  # noqa: SIM115 - owned by the process
            cmd = [
                sys.executable,
                str(script),
                "--index",
                str(i),
                "--ports",
                ports,
                "--groups",
                str(self.groups),
                "--data-dir",
                str(self.root / f"p{i}"),
                "--mode",
                self.mode,
            ]
            p = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )
            log.close()
            self.procs.append(p)
        for p in self.procs:
            hello = self._read(p)
            if not hello.get("ready"):
                raise RuntimeError(f"pysyncobj node did not start: {hello}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(self._leaders()) == self.groups:
                return
            time.sleep(0.1)
        raise RuntimeError("pysyncobj cluster did not elect leaders for every group")

    @staticmethod
    def _read(p: subprocess.Popen[str]) -> dict[str, Any]:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"pysyncobj node {p.pid} exited (rc={p.poll()})")
        data: dict[str, Any] = json.loads(line)
        return data

    def _ask_all(self, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for p, msg in zip(self.procs, msgs, strict=True):
            assert p.stdin is not None
            p.stdin.write(json.dumps(msg) + "\n")
            p.stdin.flush()
        return [self._read(p) for p in self.procs]

    def _statuses(self) -> list[dict[str, Any]]:
        return self._ask_all([{"cmd": "status"}] * len(self.procs))

    def _leaders(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for i, st in enumerate(self._statuses()):
            for gid, g in st["groups"].items():
                if g["leader"] and g["ready"]:
                    out[int(gid)] = i
        return out

    def _wal_totals(self) -> tuple[int, int]:
        sts = self._statuses()
        return (
            sum(int(s["wal"]["records"]) for s in sts),
            sum(int(s["wal"]["fsyncs"]) for s in sts),
        )

    def measure(self, per_group: int, seconds: float) -> Measurement:
        led = self._leaders()
        if len(led) != self.groups:
            raise RuntimeError(f"pysyncobj: only {len(led)}/{self.groups} groups have a leader")
        by_node: dict[int, list[int]] = {}
        for gid, i in led.items():
            by_node.setdefault(i, []).append(gid)
        before = self._wal_totals()
        msgs: list[dict[str, Any]] = []
        for i in range(len(self.procs)):
            gids = by_node.get(i, [])
            msgs.append(
                {
                    "cmd": "bench",
                    "groups": gids,
                    "concurrency": per_group,
                    "seconds": seconds if gids else 0,
                    "size": PAYLOAD,
                }
            )
        replies = self._ask_all(msgs)
        parts = [r for i, r in enumerate(replies) if by_node.get(i)]
        after = self._wal_totals()
        wal = (after[0] - before[0], after[1] - before[1])
        return combine(per_group, self.groups, parts, wal)

    def close(self) -> None:
        for p in self.procs:
            with contextlib.suppress(OSError, ValueError):
                assert p.stdin is not None
                p.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
        self.procs.clear()
