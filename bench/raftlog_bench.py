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

The clusters and their measurement are ``bench/raft_clusters.py``; this script chooses the
in-flight counts, runs the variants and prints the table. Exit status is 0 unless something
crashed; whether the targets held is printed, not enforced.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from raft_clusters import (  # this script's neighbour in bench/; it puts the repo on sys.path
    PAYLOAD,
    Measurement,
    PysyncobjCluster,
    RaftlogCluster,
)

TARGET_VS_MSYNC = 3.0
TARGET_VS_STOCK = 1.0


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
