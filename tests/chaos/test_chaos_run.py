"""A bounded chaos pass (part of `make test`): fixed seeds, every available fault kind, real
`cmq serve` processes on loopback. Longer soaks: `make chaos CHAOS_MINUTES=30`.

A failure message names the failed checks; the run directory (history.jsonl, node logs) is
kept and `python -m tests.chaos check <dir>/history.jsonl` re-checks it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from tests.chaos.failover import failover_trials
from tests.chaos.runner import ALL_FAULTS, RunConfig, fault_total, replay_command, run_once
from tests.chaos.surfaces import SURFACES
from tests.chaos.workload import WorkloadConfig

pytestmark = pytest.mark.slow

# Outside pytest's rotating temporary directories: a failed run's directory must survive.
WORKDIR = Path(os.environ.get("CHAOS_WORKDIR", "/tmp/cmq-chaos/pytest"))

BOUNDED_SURFACES = SURFACES
"""Every API surface, ``rewind`` included (the ``stream`` one was left out while its drain
stalled: docs/chaos.md, "Fixed: the stream queue did not drain")."""

KNOWN_ISSUES: tuple[str, ...] = ()
"""Restart-failure substrings of known open bugs, each with an xfail reproduction (listed,
not failed; remove an entry once it is fixed); none today."""

BOUNDED_FAILOVER_BOUND = 0.0
"""This pass reports each fault's time to the next confirmed send but does not judge it (0):
it runs beside nothing that says the machine is quiet, and a few faults per run say little
about a tail. The soak judges it (`tests.chaos.probe.FAILOVER_BOUND`, docs/chaos.md)."""

# (seed, nodes, seconds of faults): about 2 minutes together on a 2-core machine. Both seeds
# start with a `pinned` episode (clients pinned to each side of a partition; the schedule's
# first draws do not depend on the cluster), and the 3-node one follows it with a `clock`
# episode (the draws of a 3-node pinned episode do not depend on the cluster either), so every
# pass checks both. Changing ALL_FAULTS or a kind's weight re-maps the seeds: pick new ones.
# The third run is the replay of the paused-minority stall (docs/chaos.md, "Fixed"): seed 114
# with the fault list it was found with (before `clock`), one `pinned` episode whose minority
# is a data group's leader cut off in `pause` mode; its majority consumer stalled before the
# router fix.
BEFORE_CLOCK = [f for f in ALL_FAULTS if f != "clock"]
RUNS = [
    (146, 3, 35.0, ALL_FAULTS, 3),
    (120, 5, 25.0, ALL_FAULTS, 3),
    (114, 5, 6.0, BEFORE_CLOCK, 1),
]


@pytest.mark.parametrize(("seed", "nodes", "duration", "faults", "min_faults"), RUNS)
async def test_chaos_run(
    seed: int, nodes: int, duration: float, faults: list[str], min_faults: int
) -> None:
    cfg = RunConfig(
        seed=seed,
        nodes=nodes,
        duration=duration,
        faults=list(faults),
        workdir=WORKDIR,
        known_issues=KNOWN_ISSUES,
        workload=WorkloadConfig(surfaces=BOUNDED_SURFACES),
        failover_bound=BOUNDED_FAILOVER_BOUND,
    )
    result = await run_once(cfg)
    assert result.ok, (
        f"seed {seed}: {result.failures()} (logs: {result.root}; replay: {replay_command(cfg)})"
    )
    assert result.report.acked > 100, "the workload made no progress"
    assert fault_total(result.faults) >= min_faults, f"too few faults: {result.faults}"
    assert result.faults["pinned"] >= 1, f"no pinned-clients episode: {result.faults}"
    assert result.report.pinned.minority_ops > 0 and result.report.pinned.majority_ok > 0
    assert not result.report.pinned.majority_stalled
    if nodes == 3:
        assert result.faults["clock"] >= 1, f"no clock episode: {result.faults}"
    if duration >= 20:  # every API surface took part (docs/chaos.md, "API surfaces")
        s = result.report.surfaces
        assert s.fifo_deliveries and s.delayed_deliveries and s.dead_lettered, s
        assert s.scheduled_deliveries and s.ttl_deliveries and s.retried, s
        assert s.moves.get("ok") == 1, s.moves
        assert s.delivered_by.get("sqs-consumer"), s
        rw = result.report.rewind  # rewinds under the faults brought acked messages back
        assert rw.rewinds.get("ok") and rw.copies and rw.required, rw


async def test_leader_failover_recovers(tmp_path: Path) -> None:
    got = await failover_trials(tmp_path / "failover", 3, ["kill", "pause"], 1)
    for kind, values in got.items():
        assert values and all(not math.isinf(v) for v in values), (kind, values)
