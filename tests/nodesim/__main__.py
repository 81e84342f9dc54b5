"""``python -m tests.nodesim --seeds N``: run whole-node simulation seeds (`tests.nodesim.sim`);
each failing seed is printed with its trace and the command that replays it."""

from __future__ import annotations

import argparse
import logging
import sys
import time

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
    )
    bad = 0
    totals = dict.fromkeys(TOTALS, 0)
    started = time.monotonic()
    for seed in range(args.seed, args.seed + args.seeds):
        t0 = time.monotonic()
        r = run_node_seed(seed, cfg)
        wall = time.monotonic() - t0
        for k in TOTALS:
            totals[k] += getattr(r, k)
        if args.verbose:
            print(
                f"seed {seed}: ops={r.ops} confirmed={r.confirmed} acked={r.acked} "
                f"unknown={r.unknown} crashes={r.crashes} power={r.power_losses} "
                f"pauses={r.pauses} partitions={r.partitions} steps={r.clock_steps} "
                f"buggified={r.buggified} virtual={r.virtual_seconds:.0f}s wall={wall:.1f}s",
                flush=True,
            )
        if r.violations:
            bad += 1
            print(f"seed {seed}: " + "; ".join(r.violations[:3]))
            print("\n".join("    " + line for line in r.trace[-25:]))
            print(f"    replay: {r.replay()}", flush=True)
    elapsed = time.monotonic() - started
    summary = " ".join(f"{k}={v}" for k, v in totals.items())
    print(
        f"node seeds={args.seeds} nodes={args.nodes} {summary} violations={bad} "
        f"wall={elapsed:.0f}s ({elapsed / max(1, args.seeds):.2f}s/seed)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
