"""``python -m tests.nodesim --seeds N``: run whole-node simulation seeds (`tests.nodesim.sim`);
each failing seed is printed with its trace and the command that replays it."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from tests.chaos.probe import percentile
from tests.nodesim.plants import PLANTS
from tests.nodesim.sim import NodeSimConfig, run_node_seed

TOTALS = (
    "ops",
    "confirmed",
    "acked",
    "unknown",
    "crashes",
    "power_losses",
    "pauses",
    "rots",
    "repaired",
    "rewinds",
    "rewound",
    "copies_allowed",
    "copies",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.nodesim", description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--seconds", type=float, default=12.0, help="virtual seconds of faults")
    ap.add_argument("--plant", choices=PLANTS, help="plant a bug (tests.nodesim.plants)")
    ap.add_argument("--no-buggify", action="store_true", help="turn the fault points off")
    ap.add_argument("--rot", action="store_true", help="sealed segments rot; scrub and repair them")
    ap.add_argument(
        "--rewind",
        action="store_true",
        help="a queue keeping acked messages is rewound now and then",
    )
    ap.add_argument(
        "--failover",
        action="store_true",
        help="single-node faults only; per fault, the time until every group confirms a send",
    )
    ap.add_argument(
        "--clock-leaps",
        action="store_true",
        help="every clock step leaps two hours ahead on a node leading some group",
    )
    ap.add_argument(
        "--trace", type=int, default=25, help="trace lines printed for a failing seed (its last)"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print each seed's summary")
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)  # violations are reported, not log lines
    cfg = NodeSimConfig(
        nodes=args.nodes,
        seconds=args.seconds,
        plant=args.plant,
        buggify=not args.no_buggify,
        rot=args.rot,
        rewind=args.rewind,
        failover=args.failover,
        clock_leaps=args.clock_leaps,
    )
    bad = 0
    totals = dict.fromkeys(TOTALS, 0)
    failovers: dict[str, list[float]] = {}
    worst: list[tuple[float, int, str]] = []
    started = time.monotonic()
    for seed in range(args.seed, args.seed + args.seeds):
        t0 = time.monotonic()
        r = run_node_seed(seed, cfg)
        wall = time.monotonic() - t0
        for k in TOTALS:
            totals[k] += getattr(r, k)
        for kind, took in r.failovers:
            failovers.setdefault(kind, []).append(took)
            worst.append((took, seed, kind))
        if args.verbose:
            print(
                f"seed {seed}: ops={r.ops} confirmed={r.confirmed} acked={r.acked} "
                f"unknown={r.unknown} crashes={r.crashes} power={r.power_losses} "
                f"pauses={r.pauses} partitions={r.partitions} steps={r.clock_steps} "
                f"buggified={r.buggified} virtual={r.virtual_seconds:.0f}s wall={wall:.1f}s"
                + (f" failover_max={max(t for _, t in r.failovers):.3f}s" if r.failovers else ""),
                flush=True,
            )
        if r.violations:
            bad += 1
            print(f"seed {seed}: " + "; ".join(r.violations[:3]))
            print("\n".join("    " + line for line in r.trace[-args.trace :]))
            print(f"    replay: {r.replay()}", flush=True)
    elapsed = time.monotonic() - started
    summary = " ".join(f"{k}={v}" for k, v in totals.items())
    if args.failover:
        summary += " " + failover_summary(failovers)
        worst.sort(reverse=True)
        summary += " worst=" + ",".join(f"{s}:{k}:{t:.3f}s" for t, s, k in worst[:5])
    print(
        f"node seeds={args.seeds} nodes={args.nodes} {summary} violations={bad} "
        f"wall={elapsed:.0f}s ({elapsed / max(1, args.seeds):.2f}s/seed)"
    )
    return 1 if bad else 0


def failover_summary(by_kind: dict[str, list[float]]) -> str:
    """``failover[kind]=n/p50/p99/max`` per fault kind (seconds)."""
    return " ".join(
        f"failover[{k}]=n{len(v)}/p50={percentile(v, 50):.3f}s/p99={percentile(v, 99):.3f}s"
        f"/max={max(v):.3f}s"
        for k, v in sorted(by_kind.items())
    )


if __name__ == "__main__":
    sys.exit(main())
