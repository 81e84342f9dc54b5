"""One chaos run: cluster up, workload under a seeded fault schedule, heal, drain, check.

``run_once`` returns a `RunResult` (the checker's `Report`, fault counts, replica problems,
node crashes). The fault schedule (a sequence of *episodes*, each one or two faults held a
while and healed) is `tests.chaos.schedule`; the drain and the wait for the replicas to agree
after healing are `tests.chaos.settle` (their functions are importable from here too). The
seed fixes the schedule's choices (the cluster's own timing is not deterministic, so a seed
reproduces the schedule, not the interleaving).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import shlex
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmq.errors import CmqError
from tests.chaos.apicheck import CLOCK_JUDGED
from tests.chaos.checker import Report, check
from tests.chaos.cluster import ChaosCluster, MountedFS, snapshot_code
from tests.chaos.faults import lazyfs_unavailable, optional_module, resolve, restart_checked
from tests.chaos.history import History
from tests.chaos.pinned import PinnedClients
from tests.chaos.probe import (
    FAILOVER_BOUND,
    Episode,
    FaultRecovery,
    Prober,
    judge,
    over_bound,
    probe_queues,
    summary_line,
)
from tests.chaos.schedule import OVERLAP, Say, nemesis
from tests.chaos.settle import drain, queue_stats, quiesce, same_digests
from tests.chaos.surfaces import SURFACES
from tests.chaos.workload import Workload, WorkloadConfig

__all__ = [
    "ALL_FAULTS",
    "OVERLAP",
    "SLOW_RECOVERY",
    "SOAK_FAULTS",
    "VARIANTS",
    "RunConfig",
    "RunResult",
    "Say",
    "create_queues",
    "drain",
    "fault_total",
    "nemesis",
    "queue_stats",
    "quiesce",
    "replay_command",
    "run_once",
    "same_digests",
]

ALL_FAULTS = [
    "kill",
    "pause",
    "partition",
    "power-loss",
    "bitflip",
    "truncate",
    "rollback",
    "membership",
    "pinned",
    "clock",
]
SOAK_FAULTS = [*ALL_FAULTS, "io"]
"""The soak's default: every kind, I/O errors too (`tests.chaos.diskfaults`). The bounded pass in
`make test` keeps ``ALL_FAULTS`` (its seeds were picked for that list)."""

SLOW_RECOVERY = 1.0
"""Seconds: a fault whose recovery took longer is printed on its own (what the probes got)."""
VARIANTS = frozenset({"clock-jump", "clock-drift"})
"""Fault counts that refine a kind's (each ``clock`` episode is also one of these)."""


def fault_total(faults: Counter[str]) -> int:
    """How many faults were injected (variants and overlaps are not counted twice)."""
    return sum(v for k, v in faults.items() if k not in VARIANTS and not k.startswith(OVERLAP))


@dataclass
class RunConfig:
    seed: int
    nodes: int = 3
    groups: int = 2
    duration: float = 60.0
    """Seconds of workload under faults (heal and drain come after)."""
    faults: list[str] = field(default_factory=lambda: list(ALL_FAULTS))
    lazyfs: str = "one"
    """Which nodes run on a LazyFS mount when power-loss is enabled: none, one or all."""
    overlap: float = 0.3
    workdir: Path = Path("/tmp/cmq-chaos")
    keep: bool = False
    """Keep the run directory (node logs, history.jsonl) even when the run passed."""
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    drain_timeout: float = 180.0
    snapshot_entries: int = 300
    """Snapshot (and compact) every group this often, so recovery, snapshot shipping and
    segment truncation are exercised (0: the node's defaults)."""
    live_code: bool = False
    """Run the working tree's code (restarted nodes may then run newer code than the others);
    by default every node runs a copy taken when the run starts."""
    probe: bool = True
    """Probe queues (`tests.chaos.probe`): per fault, the time until every data group confirms
    a fresh send again."""
    failover_bound: float = FAILOVER_BOUND
    """Seconds a single-node fault may keep a queue from confirming (0: reported, not judged)."""
    known_issues: tuple[str, ...] = ()
    """Substrings of restart failures that are known bugs with an xfail reproduction: listed
    in the output, not failed (the bounded pass in `make test` uses this; soaks do not)."""


@dataclass
class RunResult:
    cfg: RunConfig
    report: Report
    faults: Counter[str]
    fault_errors: list[str]
    replica_problems: list[str]
    crashed: dict[int, int]
    drained: bool
    skipped: list[str]
    elapsed: float
    root: Path
    log_errors: dict[int, int]
    restart_failures: list[str] = field(default_factory=list)
    error: str = ""
    started: float = 0.0
    """When the run began (the runner's monotonic clock): faults are reported from it."""
    recoveries: list[FaultRecovery] = field(default_factory=list)
    """Per fault: the time until every probe queue confirmed a fresh send (`tests.chaos.probe`)."""

    def failures(self) -> list[str]:
        out = self.report.failures()
        if self.faults["clock-jump"]:  # stamped by clocks beyond the bound: reported only
            out = [f for f in out if not f.startswith(CLOCK_JUDGED)]
        if self.error:
            out.insert(0, f"run aborted: {self.error}")
        out += self.unknown_restart_failures()
        if self.replica_problems:
            out.append(f"replicas differ: {self.replica_problems[:3]}")
        if not self.drained:
            out.append("the queues did not drain after healing")
        if self.crashed:
            out.append(f"nodes exited on their own: {self.crashed}")
        if self.cfg.failover_bound:
            slow = over_bound(self.recoveries, self.cfg.failover_bound)
            out += [
                f"failover over {self.cfg.failover_bound:g}s: {r.episode.description} "
                f"at +{r.episode.at - self.started:.1f}s: {r.seconds:.3f}s "
                f"(probes refused: {r.refusals or 'none'})"
                for r in slow
            ]
        return out

    @property
    def ok(self) -> bool:
        return not self.failures()

    def notes(self) -> list[str]:
        """Reported, not failed: the report's notes (`Report.notes`) and, in a run with clock
        jumps, its failures that judge real time (`CLOCK_JUDGED`)."""
        out = self.report.notes()
        if self.faults["clock-jump"]:
            out += [f for f in self.report.failures() if f.startswith(CLOCK_JUDGED)]
        return out

    def unknown_restart_failures(self) -> list[str]:
        return [f for f in self.restart_failures if not self.known(f)]

    def known_failures(self) -> list[str]:
        """Restart failures matching `RunConfig.known_issues`: reported, not failed."""
        return [f for f in self.restart_failures if self.known(f)]

    def known(self, failure: str) -> bool:
        return any(k in failure for k in self.cfg.known_issues)


def replay_command(cfg: RunConfig) -> str:
    """The command that runs ``cfg`` again: the same fault schedule and the same client choices
    for every operation both runs reach (the cluster's timing is not replayable)."""
    args = [
        "python -m tests.chaos run",
        f"--seeds {cfg.seed}",
        f"--nodes {cfg.nodes}",
        f"--groups {cfg.groups}",
        f"--duration {cfg.duration:g}",
        f"--faults {','.join(cfg.faults)}",
        f"--lazyfs {cfg.lazyfs}",
        f"--overlap {cfg.overlap:g}",
        f"--snapshot-entries {cfg.snapshot_entries}",
        "--keep",
    ]
    if cfg.workload.surfaces != SURFACES:  # the command line's default: every surface
        args.append(f"--surfaces {','.join(cfg.workload.surfaces)}")
    args += [f"--known-issue {shlex.quote(k)}" for k in cfg.known_issues]
    if cfg.live_code:
        args.append("--live-code")
    if not cfg.probe:
        args.append("--no-probe")
    if cfg.failover_bound != FAILOVER_BOUND:
        args.append(f"--failover-bound {cfg.failover_bound:g}")
    if dataclasses.replace(cfg.workload, surfaces=WorkloadConfig().surfaces) != WorkloadConfig():
        args.append(f"# with WorkloadConfig{dataclasses.astuple(cfg.workload)}")
    return " ".join(args)


def _printer(prefix: str, say: Say) -> Say:
    t0 = time.monotonic()
    return lambda text: say(f"[{prefix} +{time.monotonic() - t0:6.1f}s] {text}")


def _make_mounts(cfg: RunConfig, cluster: ChaosCluster, rng: random.Random) -> dict[int, Any]:
    if "power-loss" not in cfg.faults or cfg.lazyfs == "none" or lazyfs_unavailable():
        return {}
    mod, _ = optional_module("tests.chaos.lazyfs")
    assert mod is not None
    nodes = cluster.ids if cfg.lazyfs == "all" else [rng.choice(cluster.ids)]
    return {
        nid: mod.LazyFS(cluster.root / f"node{nid}" / "backing", cluster.data_dir(nid))
        for nid in nodes
    }


async def create_queues(
    cluster: ChaosCluster, queues: tuple[str, ...], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    for q in queues:
        while True:
            node = cluster.node(cluster.running()[0], timeout=10)
            try:
                await node.create_queue(q, {"visibility_timeout": 2})
                break
            except CmqError:  # retried until the deadline below
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not create queue {q}")
            await asyncio.sleep(0.5)


async def run_once(cfg: RunConfig, say: Say = print) -> RunResult:
    started = time.monotonic()
    rng = random.Random(cfg.seed)
    root = cfg.workdir / f"seed{cfg.seed}-n{cfg.nodes}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    say = _printer(f"seed {cfg.seed} n={cfg.nodes}", say)
    say(f"replay: {replay_command(cfg)}")
    code = None if cfg.live_code else snapshot_code(root / "code")
    options = (
        {"snapshot_entries": cfg.snapshot_entries, "keep_entries": cfg.snapshot_entries // 2}
        if cfg.snapshot_entries
        else None
    )
    cluster = ChaosCluster(root, cfg.nodes, cfg.groups, code, options)
    mounts: dict[int, MountedFS] = _make_mounts(cfg, cluster, rng)
    history = History(root / "history.jsonl")
    skipped: list[str] = []

    def note_skip(text: str) -> None:
        skipped.append(text)
        say(text)

    counts: Counter[str] = Counter()
    errors: list[str] = []
    replica_problems: list[str] = []
    drained = False
    crashed: dict[int, int] = {}
    restart_failures: list[str] = []
    run_error = ""
    episodes: list[Episode] = []
    prober: Prober | None = None
    workload = Workload(cluster.http, history, cfg.workload, rng.getrandbits(64), f"s{cfg.seed}")
    try:
        try:
            await cluster.start(lazyfs=mounts)
        except Exception as e:
            if not mounts:
                raise
            note_skip(f"LazyFS mounts failed ({e!r}); running without power loss")
            await cluster.stop()
            cluster = ChaosCluster(root / "retry", cfg.nodes, cfg.groups, code, options)
            workload.urls = cluster.http
            await cluster.start()
        kinds = resolve(cfg.faults, cluster, note_skip)
        for kind in kinds:
            if isinstance(kind, PinnedClients):
                kind.history, kind.tag, kind.queues = history, f"s{cfg.seed}", cfg.workload.queues
                kind.key_of = workload.key_of
        say(
            f"cluster ready (lazyfs on {sorted(cluster.mounts)}); faults: {[k.name for k in kinds]}"
        )
        await create_queues(cluster, cfg.workload.queues)
        if cfg.probe:
            probes = await probe_queues(cluster)
            prober = Prober(cluster, probes, random.Random(f"probe-{cfg.seed}"))
            prober.start()
        await workload.start()
        counts, errors, restart_failures = await nemesis(
            cluster,
            kinds,
            rng,
            duration=cfg.duration,
            history=history,
            overlap=cfg.overlap,
            say=say,
            episodes=episodes,
        )
        crashed = dict(cluster.exited())
        if crashed:
            say(f"nodes exited on their own: {crashed}")
        await cluster.heal_all()
        final = await restart_checked(cluster, cluster.ids)
        if final:
            restart_failures.append(f"final restart: {final}")
            say(final)
        await cluster.wait_ready(120)
        await asyncio.sleep(1.0)
        if prober is not None:
            await prober.stop()
        await workload.stop_producers()
        say("producers stopped; draining")
        drained = await drain(cluster, workload, workload.queues, cfg.drain_timeout)
        await workload.stop()
        say(f"drained={drained}; checking replicas")
        replica_problems = await quiesce(cluster, workload.queues, say=say)
    except Exception as e:  # the run fails with the reason; the history is still checked
        run_error = f"{type(e).__name__}: {e}"
        say(f"run aborted: {run_error}")
    finally:
        if prober is not None:
            await prober.stop()
        with contextlib.suppress(Exception):
            await workload.stop()
        await cluster.stop()
        history.close()
    # Leases stamped by a drifting clock may end early in real time by up to the skew it
    # reached (under the bound): overlaps are judged beyond that skew.
    report = check(history.ops, tolerance=0.01 + cluster.drift_skew_ms / 1000)
    result = RunResult(
        cfg=cfg,
        report=report,
        faults=counts,
        fault_errors=errors,
        replica_problems=replica_problems,
        crashed=crashed,
        drained=drained,
        skipped=skipped,
        elapsed=time.monotonic() - started,
        started=started,
        root=root,
        log_errors=cluster.log_lines("Traceback"),
        restart_failures=restart_failures,
        error=run_error,
        recoveries=judge(episodes, prober.sends, prober.queues) if prober else [],
    )
    if result.ok and not cfg.keep:
        if any(result.log_errors.values()):  # keep the logs and the history, not the data
            for d in [root / "code", *root.glob("node*/"), *root.glob("rollback-*")]:
                shutil.rmtree(d, ignore_errors=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    say(
        f"{'PASS' if result.ok else 'FAIL'}: ops={report.ops} acked={report.acked} "
        f"lost={len(report.lost)} unexpected={len(report.unexpected)} "
        f"duplicated={len(report.duplicated)} recovered={len(report.recovered)} "
        f"redelivered_after_ack={len(report.redelivered_after_ack)} "
        f"lease_overlaps={len(report.lease_overlaps)} faults={dict(counts)}"
    )
    if result.recoveries:
        say(f"  {summary_line(result.recoveries)}")
        for r in result.recoveries:
            if r.seconds > SLOW_RECOVERY:
                say(
                    f"  slow recovery: {r.episode.description} at +{r.episode.at - started:.1f}s: "
                    f"{r.seconds:.3f}s (probes refused: {r.refusals or 'none'})"
                )
    if report.pinned.episodes:
        p = report.pinned
        say(
            f"  pinned clients: {p.episodes} episodes; minority ops={p.minority_ops} "
            f"refused={p.minority_refused} empty_reads={p.minority_empty_reads} "
            f"confirms={len(p.minority_confirms)}; majority receives ok={p.majority_ok} "
            f"stalled={len(p.majority_stalled)}"
        )
    for f in result.failures():
        say(f"  FAILED CHECK: {f}")
    if not result.ok:
        say(f"  replay with: {replay_command(cfg)}")
    for f in result.known_failures():
        say(f"  known issue (not failed): {f}")
    for f in result.notes():
        say(f"  noted (not failed): {f}")
    if root.exists():
        say(f"  history and node logs kept in {root}")
    return result
