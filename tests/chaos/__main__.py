"""``python -m tests.chaos``: Jepsen-style runs against real cmq clusters (see docs/chaos.md).

    python -m tests.chaos run --seeds 1,2,3 [--nodes 3] [--duration 60] [--faults kill,pause]
    python -m tests.chaos soak --minutes 30 [--failover-trials 20]
    python -m tests.chaos failover --trials 20 [--nodes 3] [--kinds kill,pause]
    python -m tests.chaos check path/to/history.jsonl

Exit status 1 when any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections import Counter
from pathlib import Path

from tests.chaos.checker import check, summarize
from tests.chaos.failover import failover_trials, percentile
from tests.chaos.history import load_jsonl
from tests.chaos.probe import FAILOVER_BOUND, summary_line
from tests.chaos.runner import (
    SOAK_FAULTS,
    RunConfig,
    RunResult,
    fault_total,
    replay_command,
    run_once,
)
from tests.chaos.surfaces import SURFACES
from tests.chaos.workload import WorkloadConfig

COLUMNS = [
    ("seed", 6),
    ("nodes", 5),
    ("secs", 5),
    ("faults", 6),
    ("ops", 7),
    ("attempted", 9),
    ("acked", 7),
    ("lost", 5),
    ("unexpected", 10),
    ("duplicated", 10),
    ("recovered", 9),
    ("redeliv-after-ack", 17),
    ("lease-overlap", 13),
    ("result", 6),
]


def _row(values: list[object]) -> str:
    return " ".join(str(v).rjust(w) for v, (_, w) in zip(values, COLUMNS, strict=True))


def table(results: list[RunResult], failover: dict[str, list[float]] | None = None) -> str:
    lines = [_row([name for name, _ in COLUMNS])]
    for r in results:
        rep = r.report
        lines.append(
            _row(
                [
                    r.cfg.seed,
                    r.cfg.nodes,
                    round(r.elapsed),
                    fault_total(r.faults),
                    rep.ops,
                    rep.attempted,
                    rep.acked,
                    len(rep.lost),
                    len(rep.unexpected) + len(rep.failed_delivered),
                    len(rep.duplicated),
                    len(rep.recovered),
                    len(rep.redelivered_after_ack),
                    len(rep.lease_overlaps),
                    "ok" if r.ok else "FAIL",
                ]
            )
        )
    tot = summarize(r.report for r in results)
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults)
    if results:
        lines.append(
            _row(
                [
                    "total",
                    f"{tot['runs']}r",
                    round(sum(r.elapsed for r in results)),
                    fault_total(faults),
                    tot["operations"],
                    tot["attempted"],
                    tot["acked"],
                    tot["lost"],
                    tot["unexpected"] + tot["failed_delivered"],
                    tot["duplicated"],
                    tot["recovered"],
                    tot["redelivered_after_ack"],
                    tot["lease_overlaps"],
                    "ok" if all(r.ok for r in results) else "FAIL",
                ]
            )
        )
        lines.append("faults by kind: " + ", ".join(f"{k}={v}" for k, v in sorted(faults.items())))
        lines.append(
            f"deliveries={tot['deliveries']} consumed(acked by consumers)={tot['consumed']} "
            f"stored-twice={tot['stored_twice']} lease-forks={tot['lease_forks']}"
        )
        lines.append(
            f"surfaces: fifo deliveries={tot['fifo_deliveries']} "
            f"delayed deliveries={tot['delayed_deliveries']} "
            f"(deliver_at {tot['scheduled_deliveries']}) "
            f"ttl deliveries={tot['ttl_deliveries']} expired unseen={tot['expired_unseen']} "
            f"retries judged={tot['retried']} "
            f"dead-lettered={tot['dead_lettered']} redriven={tot['redriven']} "
            f"surface check failures={tot['surface_failures']}"
        )
        lines.append(
            f"rewinds={tot['rewinds']} (ok {tot['rewinds_ok']}, unknown "
            f"{tot['rewinds_unknown']}) rewound(as answered)={tot['rewound_reported']} "
            f"acked keys judged={tot['rewind_judged']} copies allowed={tot['rewind_allowed']} "
            f"seen={tot['rewind_copies']} required={tot['rewind_required']}"
        )
        by: Counter[str] = Counter()
        for r in results:
            by.update(r.report.surfaces.delivered_by)
        lines.append(
            "deliveries by client: " + ", ".join(f"{k}={v}" for k, v in sorted(by.items()))
        )
        for r in results:
            for f in r.known_failures():
                lines.append(f"known issue (seed {r.cfg.seed}, not failed): {f[:300]}")
            for f in r.notes():
                lines.append(f"noted (seed {r.cfg.seed}, not failed): {f[:300]}")
            for f in r.failures():
                lines.append(f"FAILED (seed {r.cfg.seed}): {f[:500]}")
            if not r.ok:
                lines.append(f"replay (seed {r.cfg.seed}): {replay_command(r.cfg)}")
        skipped = sorted({s for r in results for s in r.skipped})
        for s in skipped:
            lines.append(f"skipped: {s}")
        recoveries = [x for r in results for x in r.recoveries]
        if recoveries:
            lines.append(summary_line(recoveries))
        crashes = {f"seed{r.cfg.seed}": r.log_errors for r in results if any(r.log_errors.values())}
        if crashes:
            lines.append(f"node logs with tracebacks (count per node): {crashes}")
    if failover:
        lines.append(failover_line(failover))
    return "\n".join(lines)


def failover_line(failover: dict[str, list[float]]) -> str:
    parts = []
    for kind, values in failover.items():
        finite = [v for v in values if not math.isinf(v)]
        parts.append(
            f"leader {kind}: n={len(values)} p50={percentile(values, 50):.3f}s "
            f"p99={percentile(values, 99):.3f}s max={max(values, default=math.nan):.3f}s"
            + (
                f" ({len(values) - len(finite)} never recovered)"
                if len(finite) < len(values)
                else ""
            )
        )
    return "failover (fault -> first confirmed send issued after it): " + "; ".join(parts)


def _seeds(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", default="3", help="cluster sizes, e.g. 3 or 3,5 (alternated)")
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--duration", type=float, default=60, help="seconds of faults per run")
    p.add_argument("--faults", default=",".join(SOAK_FAULTS))
    p.add_argument("--lazyfs", choices=["none", "one", "all"], default="one")
    p.add_argument(
        "--overlap", type=float, default=0.3, help="chance of a second fault in an episode"
    )
    p.add_argument("--workdir", type=Path, default=Path("/tmp/cmq-chaos"))
    p.add_argument("--keep", action="store_true", help="keep run directories of passing runs")
    p.add_argument(
        "--snapshot-entries",
        type=int,
        default=300,
        help="snapshot every group this often (0: node defaults)",
    )
    p.add_argument(
        "--known-issue",
        action="append",
        default=[],
        help="a restart-failure substring to report without failing (repeatable)",
    )
    p.add_argument(
        "--surfaces",
        default=",".join(SURFACES),
        help="API surfaces the clients use (default: all): " + ",".join(SURFACES),
    )
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="no probe queues (no per-fault time to the next confirmed send)",
    )
    p.add_argument(
        "--failover-bound",
        type=float,
        default=FAILOVER_BOUND,
        help="seconds a single-node fault may keep a queue from confirming (0: not judged)",
    )
    p.add_argument(
        "--live-code",
        action="store_true",
        help="nodes run the working tree (default: a copy taken at the start of each run)",
    )


def _config(args: argparse.Namespace, seed: int, nodes: int) -> RunConfig:
    return RunConfig(
        seed=seed,
        nodes=nodes,
        groups=args.groups,
        duration=args.duration,
        faults=[f for f in args.faults.split(",") if f],
        lazyfs=args.lazyfs,
        overlap=args.overlap,
        workdir=args.workdir,
        keep=args.keep,
        live_code=args.live_code,
        probe=not args.no_probe,
        failover_bound=args.failover_bound,
        snapshot_entries=args.snapshot_entries,
        known_issues=tuple(args.known_issue),
        workload=WorkloadConfig(surfaces=_surfaces(args.surfaces)),
    )


def _surfaces(text: str) -> tuple[str, ...]:
    """The surfaces named in ``text`` (comma-separated), in `SURFACES` order."""
    names = {s.strip() for s in text.split(",") if s.strip()}
    unknown = names - set(SURFACES)
    if unknown:
        raise SystemExit(f"unknown surfaces {sorted(unknown)}; known: {','.join(SURFACES)}")
    return tuple(s for s in SURFACES if s in names)


async def _main(args: argparse.Namespace) -> int:
    if args.cmd == "check":
        rep = check(load_jsonl(args.history))
        print(rep)
        for f in rep.failures():
            print("FAILED CHECK:", f)
        for f in rep.notes():
            print("NOTED (not failed):", f)
        return 0 if rep.ok else 1
    if args.cmd == "failover":
        kinds = [k for k in args.kinds.split(",") if k]
        fo = await failover_trials(args.workdir / "failover", args.nodes, kinds, args.trials)
        print(failover_line(fo))
        return 0
    sizes = [int(n) for n in args.nodes.split(",")]
    results: list[RunResult] = []
    if args.cmd == "run":
        for i, seed in enumerate(_seeds(args.seeds)):
            results.append(await run_once(_config(args, seed, sizes[i % len(sizes)])))
    else:  # soak: new seeds until the time is up
        end = time.monotonic() + args.minutes * 60
        seed = args.first_seed
        i = 0
        while time.monotonic() < end:
            results.append(await run_once(_config(args, seed, sizes[i % len(sizes)])))
            seed += 1
            i += 1
    failover = None
    if args.cmd == "soak" and args.failover_trials:
        failover = await failover_trials(
            args.workdir / "failover", sizes[0], ["kill", "pause"], args.failover_trials
        )
    print()
    print(table(results, failover))
    return 0 if all(r.ok for r in results) else 1


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run", help="one run per seed")
    p_run.add_argument("--seeds", default="1")
    _add_run_args(p_run)
    p_soak = sub.add_parser("soak", help="runs with consecutive seeds for --minutes")
    p_soak.add_argument("--minutes", type=float, default=10)
    p_soak.add_argument("--first-seed", type=int, default=int(time.time()) % 100000)
    p_soak.add_argument("--failover-trials", type=int, default=10)
    _add_run_args(p_soak)
    p_fo = sub.add_parser("failover", help="leader failover time over many trials")
    p_fo.add_argument("--nodes", type=int, default=3)
    p_fo.add_argument("--trials", type=int, default=20)
    p_fo.add_argument("--kinds", default="kill,pause")
    p_fo.add_argument("--workdir", type=Path, default=Path("/tmp/cmq-chaos"))
    p_chk = sub.add_parser("check", help="check a saved history.jsonl")
    p_chk.add_argument("history", type=Path)
    return parser


def config_of(argv: list[str]) -> RunConfig:
    """The `RunConfig` of ``run`` arguments (its first seed and cluster size)."""
    args = make_parser().parse_args(argv)
    return _config(args, _seeds(args.seeds)[0], int(args.nodes.split(",")[0]))


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
