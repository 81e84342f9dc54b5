"""raftlog vs pysyncobj: committed 1 KiB proposals/s on a 3-node loopback cluster.

Every variant runs on a fresh 3-process cluster in a fresh temp dir, back to back:

- raftlog, fsync on (it always fdatasyncs before acknowledging), G groups for each G of
  ``--groups``; load generated inside each leader process (``POST /bench``).
- pysyncobj 0.3.17 ``stock`` (its journal is never flushed) and ``msync`` (one msync of the
  journal per batch of appends, see ``bench/pysyncobj_node.py``), same G values, load
  generated inside the leader process the same way.

For each variant the in-flight proposal count is chosen by a short probe over a ladder
(``--ladder`` for raftlog, ``--pysyncobj-ladder``: total proposals in flight across the
cluster, split evenly over the groups) on a scratch cluster; the best step is then measured
for ``--seconds`` on a fresh cluster after ``--warmup`` seconds. With ``--runs N`` every
variant is measured N times (fresh cluster each time, the probe only in run 1) and medians are
reported. Both systems run the load inside the leader process(es), closed-loop: each in-flight
slot proposes again as soon as its proposal is applied on the leader.

Columns: ``rec/fsync`` is the WAL's own counter summed over the 3 nodes (raftlog: a record is
one Raft entry -- which carries a whole batch of proposals -- or a hard-state record;
pysyncobj: one journal entry = one proposal); ``props/fsync`` is committed proposals x 3
replicas / fsyncs (msyncs) on the 3 nodes, the group-commit gain comparable across systems.
With several leader processes (G > 1) p50/p99 are the worst leader's.

    python bench/raftlog_bench.py [--seconds 10] [--runs 1] [--groups 1,8] [--skip-pysyncobj]

Exit status is 0 unless something crashed; whether the targets held is printed, not enforced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
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
TARGET_VS_MSYNC = 3.0
TARGET_VS_STOCK = 1.0


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


# --------------------------------------------------------------------------- driver


@dataclass
class Variant:
    system: str
    mode: str
    groups: int
    per_group: int | None = None
    """In-flight proposals per group, chosen by the probe in the first run."""
    probes: list[Measurement] = field(default_factory=list)
    runs: list[Measurement] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.system} {self.mode} G={self.groups}"

    def median(self, key: Callable[[Measurement], float | None]) -> float | None:
        vals = [v for v in (key(m) for m in self.runs) if v is not None]
        return statistics.median(vals) if vals else None


@contextlib.contextmanager
def cluster_for(v: Variant, root: Path) -> Iterator[RaftlogCluster | PysyncobjCluster]:
    c: RaftlogCluster | PysyncobjCluster
    if v.system == "raftlog":
        c = RaftlogCluster(root, v.groups)
    else:
        c = PysyncobjCluster(root, v.groups, v.mode)
    with c:
        yield c


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def describe(m: Measurement) -> str:
    rpf, ppf = m.records_per_fsync, m.proposals_per_fsync
    err = f" errors={m.errors}" if m.errors else ""
    return (
        f"{m.rate:9.0f}/s  p50 {fmt_ms(m.p50)} ms  p99 {fmt_ms(m.p99)} ms  "
        f"rec/fsync {'-' if rpf is None else f'{rpf:.1f}'}  "
        f"props/fsync {'-' if ppf is None else f'{ppf:.0f}'}{err}"
    )


def fresh_dir(v: Variant, tmp: Path, what: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{v.system}-{v.mode}-g{v.groups}-{what}-", dir=tmp))


def run_variant(v: Variant, args: argparse.Namespace, tmp: Path, run: int) -> None:
    if v.per_group is None:
        ladder = args.ladder if v.system == "raftlog" else args.pysyncobj_ladder
        root = fresh_dir(v, tmp, "probe")
        with cluster_for(v, root) as c:
            for total in ladder:
                per_group = max(1, total // v.groups)
                m = c.measure(per_group, args.probe_seconds)
                v.probes.append(m)
                print(f"  probe {v.label:26} in-flight {m.concurrency:5}: {describe(m)}")
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        v.per_group = max(v.probes, key=lambda m: m.rate).per_group
    root = fresh_dir(v, tmp, f"run{run}")
    t0 = time.monotonic()
    with cluster_for(v, root) as c:
        if args.warmup > 0:
            c.measure(v.per_group, args.warmup)
        m = c.measure(v.per_group, args.seconds)
        v.runs.append(m)
        print(
            f"  run {run}: {v.label:26} in-flight {m.concurrency:5}: {describe(m)}"
            f"  ({time.monotonic() - t0:.0f}s incl. startup)",
            flush=True,
        )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


def print_table(variants: list[Variant], runs: int) -> None:
    hdr = (
        "system",
        "mode",
        "G",
        "in-flight",
        "committed/s",
        "p50 ms",
        "p99 ms",
        "rec/fsync",
        "props/fsync",
    )
    rows = []
    for v in variants:
        if not v.runs:
            continue
        rate = v.median(lambda m: m.rate)
        rpf = v.median(lambda m: m.records_per_fsync)
        ppf = v.median(lambda m: m.proposals_per_fsync)
        never = v.mode == "stock"
        inflight = f"{v.runs[0].concurrency}"
        if v.groups > 1:
            inflight += f" ({v.per_group}/g)"
        rows.append(
            (
                v.system,
                "fsync" if v.system == "raftlog" else v.mode,
                str(v.groups),
                inflight,
                f"{rate:.0f}" if rate is not None else "-",
                fmt_ms(v.median(lambda m: m.p50)),
                fmt_ms(v.median(lambda m: m.p99)),
                "never" if never else ("-" if rpf is None else f"{rpf:.1f}"),
                "never" if never else ("-" if ppf is None else f"{ppf:.0f}"),
            )
        )
    widths = [max(len(r[i]) for r in [hdr, *rows]) for i in range(len(hdr))]
    print()
    print(f"Results ({'median of ' + str(runs) + ' runs' if runs > 1 else '1 run'}):")
    for r in [hdr, *rows]:
        print(
            "  "
            + "  ".join(
                c.rjust(w) if i >= 2 else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )


def print_ratios(variants: list[Variant]) -> None:
    def rate(system: str, mode: str, groups: int) -> float | None:
        for v in variants:
            if (v.system, v.mode, v.groups) == (system, mode, groups) and v.runs:
                return v.median(lambda m: m.rate)
        return None

    raft_gs = sorted({v.groups for v in variants if v.system == "raftlog" and v.runs})
    print()
    print("Ratios (committed/s):")
    verdicts = []
    for g in raft_gs:
        ours = rate("raftlog", "fsync", g)
        for mode in ("msync", "stock"):
            # compare with pysyncobj at the same G, and always with pysyncobj G=1
            for pg in sorted({g, 1}):
                theirs = rate("pysyncobj", mode, pg)
                if ours is None or theirs is None or theirs == 0:
                    continue
                ratio = ours / theirs
                print(f"  raftlog(G={g}) / pysyncobj-{mode}(G={pg}) = {ratio:6.2f}x")
                if g == 1 and pg == 1:
                    target = TARGET_VS_MSYNC if mode == "msync" else TARGET_VS_STOCK
                    verdicts.append((mode, ratio, target))
    print()
    if not verdicts:
        print("Targets: not evaluated (need raftlog G=1 and pysyncobj G=1)")
    for mode, ratio, target in verdicts:
        held = "HELD" if ratio >= target else "MISSED"
        print(
            f"Target raftlog(G=1, fsync) >= {target:g}x pysyncobj-{mode}(G=1): "
            f"{held} ({ratio:.2f}x)"
        )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu}), "
        f"Python {platform.python_version()}"
    )


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per variant")
    p.add_argument("--runs", type=int, default=1, help="measurements per variant (medians)")
    p.add_argument("--groups", type=parse_ints, default=[1, 8], help="e.g. 1,8")
    p.add_argument("--skip-pysyncobj", action="store_true")
    p.add_argument(
        "--pysyncobj-groups",
        type=parse_ints,
        default=None,
        help="G values for pysyncobj (default: same as --groups)",
    )
    p.add_argument(
        "--ladder",
        type=parse_ints,
        default=[64, 256, 512, 1024],
        help="raftlog: total in-flight proposals to probe (split over the groups)",
    )
    p.add_argument(
        "--pysyncobj-ladder",
        type=parse_ints,
        default=[1024, 2048, 4096, 8192, 16384],
        help="pysyncobj: total in-flight proposals to probe (its leader sends batches every "
        "100 ms, so it needs far more in flight to saturate)",
    )
    p.add_argument("--probe-seconds", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=1.0, help="discarded seconds before each run")
    p.add_argument("--tmp", default=None, help="parent of the temp dirs (default: system tmp)")
    p.add_argument("--keep", action="store_true", help="keep data dirs and node logs")
    args = p.parse_args(argv)

    variants = [Variant("raftlog", "fsync", g) for g in args.groups]
    if not args.skip_pysyncobj:
        pgs = args.pysyncobj_groups if args.pysyncobj_groups is not None else args.groups
        for mode in ("stock", "msync"):
            variants += [Variant("pysyncobj", mode, g) for g in pgs]

    print(f"machine: {machine()}")
    print(
        f"workload: 3 nodes on loopback, {PAYLOAD} B proposals, {args.seconds:g}s per variant, "
        f"{args.runs} run(s); probe ladders raftlog {args.ladder}, pysyncobj "
        f"{args.pysyncobj_ladder}, {args.probe_seconds:g}s each"
    )
    tmp = Path(tempfile.mkdtemp(prefix="raftlog-bench-", dir=args.tmp))
    print(f"data under {tmp}", flush=True)

    # SIGTERM -> the same cleanup path as Ctrl-C.
    def on_term(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    rc = 0
    try:
        for run in range(1, args.runs + 1):
            for v in variants:
                run_variant(v, args, tmp, run)
    except KeyboardInterrupt:
        print("\ninterrupted; every node process has been stopped", file=sys.stderr)
        rc = 130
    except Exception:
        traceback.print_exc()
        print("benchmark crashed; every node process has been stopped", file=sys.stderr)
        rc = 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print_table(variants, args.runs)
    print_ratios(variants)
    return rc


if __name__ == "__main__":
    sys.exit(main())
