"""Command line: ``python -m raftlog.sim --seeds N --steps M [--nodes 3|5] [--groups G]
[--seed S] [--plant NAME]``.

Runs seeds ``S .. S+N-1`` and prints one summary line ``seeds=… steps=… violations=…``; each
violation is printed before it with its check, trace and replay command. Exit status 1 when any
violation was found, else 0 (also for ``--plant`` runs: the status reports violations, not
whether the planted bug was caught).
"""

from __future__ import annotations

import argparse
import sys
import time

from raftlog.core.config import UnsafeHooks
from raftlog.sim.liveness import HEAL_TIMEOUTS
from raftlog.sim.outcome import SimConfig
from raftlog.sim.run import run_seed

PLANTS = {
    "none": UnsafeHooks(),
    "commit_on_minority": UnsafeHooks(commit_on_minority=True),
    "vote_twice": UnsafeHooks(vote_twice=True),
    "slow_elections": UnsafeHooks(slow_elections=True),
    "lazy_pipeline": UnsafeHooks(lazy_pipeline=True),
    "skip_recovery": UnsafeHooks(skip_recovery=True),
}

SWITCHES = (
    ("--silent-loss", "random losses are not reported to the sender (default: on)"),
    ("--rollbacks", "roll crashed nodes' disks back to older backups now and then (default: on)"),
    ("--small-windows", "also use inflight windows of 1 and 4 (default: on)"),
    (
        "--rejoin-wiped",
        "start wiped nodes in rejoin mode (default: on; off shows why it is needed)",
    ),
)
"""The on-by-default switches (``--no-…`` turns one off): flag and help."""


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the seeds, print the summary; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m raftlog.sim", description=__doc__)
    ap.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    ap.add_argument("--steps", type=int, default=3000, help="chaos steps per seed")
    ap.add_argument("--nodes", type=int, default=3, help="nodes per cluster (3 or 5)")
    ap.add_argument("--groups", type=int, default=2, help="Raft groups per cluster")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument(
        "--heal-timeouts",
        type=int,
        default=HEAL_TIMEOUTS,
        help="liveness bound after healing, in election timeouts beyond the catch-up the "
        "run's windows need (raftlog.sim.liveness)",
    )
    ap.add_argument("--plant", choices=sorted(PLANTS), default="none", help="plant a core bug")
    for flag, text in SWITCHES:
        ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=True, help=text)
    ap.add_argument(
        "--wipe-rejoining",
        action="store_true",
        help="re-add removed nodes with an empty disk under the same id",
    )
    ap.add_argument("--stop", action="store_true", help="stop at the first violation")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per seed")
    args = ap.parse_args(argv)
    config = SimConfig(
        nodes=args.nodes,
        groups=args.groups,
        steps=args.steps,
        heal_timeouts=args.heal_timeouts,
        unsafe=PLANTS[args.plant],
        silent_loss=args.silent_loss,
        wipe_rejoining=args.wipe_rejoining,
        rejoin_wiped=args.rejoin_wiped,
        small_windows=args.small_windows,
        rollbacks=args.rollbacks,
    )
    try:
        config.validate()
    except ValueError as exc:
        ap.error(str(exc))
    started = time.perf_counter()
    violations = 0
    seeds = 0
    total = 0
    for seed in range(args.seed, args.seed + args.seeds):
        result = run_seed(seed, config)
        seeds += 1
        total += result.steps + result.heal_steps
        if args.verbose:
            print(
                f"seed={seed} steps={result.steps} heal_steps={result.heal_steps} "
                f"{'FAIL ' + result.violation.check if result.violation else 'ok'} "
                + " ".join(f"{k}={v}" for k, v in result.stats),
                flush=True,
            )
        if result.violation is not None:
            violations += 1
            print(result.violation.format(config), flush=True)
            if args.stop:
                break
    elapsed = time.perf_counter() - started
    print(
        f"seeds={seeds} steps={args.steps} violations={violations} nodes={args.nodes} "
        f"groups={args.groups} total_steps={total} elapsed={elapsed:.1f}s"
    )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
