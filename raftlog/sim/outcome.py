"""What a simulation run is given (`SimConfig`, the per-seed `Params`) and what it reports
(`SimResult`, `Violation`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from raftlog.core.config import UnsafeHooks
from raftlog.sim.liveness import HEAL_TIMEOUTS
from raftlog.sim.network import NetFaults


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The shape of a run. ``unsafe`` plants a core bug (tests prove the checker catches it)."""

    nodes: int = 3
    groups: int = 2
    steps: int = 3000
    heal_timeouts: int = HEAL_TIMEOUTS
    """Liveness bound after healing, in election timeouts, on top of the catch-up the run's
    own settings need (`raftlog.sim.liveness`)."""
    trace_lines: int = 30
    unsafe: UnsafeHooks = field(default_factory=UnsafeHooks)
    silent_loss: bool = True
    """When True (default), random losses go unnoticed by both ends (datagram semantics): the
    core must recover on its own, e.g. re-probe a follower whose append was lost while its
    REPLICATE inflight window was full. When False, both ends of a link notice every lost
    message, as with the TCP transport, and every group on both nodes gets
    ``report_unreachable`` for the peer."""
    small_windows: bool = True
    """Also draw inflight windows of 1 and 4 messages (False: 256 only), so full windows --
    and recovery from a lost append while full -- are exercised constantly."""
    rejoin_wiped: bool = True
    """With ``wipe_rejoining``: start a wiped node in the core's rejoin mode (it neither votes
    nor campaigns until caught up), which makes reusing its id safe."""
    wipe_rejoining: bool = False
    """Re-add a removed node with an *empty* disk under its old id. Unsafe: the removed node's
    log may be the copy that made the removal committed for a node that restarts with an older
    configuration (found by seed 244 with five nodes; see the README). Off by default."""

    rollbacks: bool = True
    """Restore a crashed node's disks, now and then, to an older backup of them
    (`raftlog.sim.rollback`): the core's recovery rule must lose nothing acknowledged."""

    def validate(self) -> None:
        """Raise ``ValueError`` for a shape the simulator cannot run."""
        if not 1 <= self.nodes <= 9:
            raise ValueError("nodes must be in 1..9")
        if self.groups < 1 or self.steps < 0 or self.heal_timeouts < 1:
            raise ValueError("need groups >= 1, steps >= 0, heal_timeouts >= 1")


@dataclass(frozen=True, slots=True)
class Violation:
    """A failed run: which check, where, and the trace leading to it."""

    seed: int
    check: str
    detail: str
    step: int
    trace: tuple[str, ...]

    def format(self, config: SimConfig) -> str:
        """A human-readable report including the command that replays it."""
        flags = [
            f"--seeds 1 --seed {self.seed} --steps {config.steps}",
            f"--nodes {config.nodes} --groups {config.groups}",
        ]
        if config.heal_timeouts != SimConfig().heal_timeouts:
            flags.append(f"--heal-timeouts {config.heal_timeouts}")
        for name in (
            "commit_on_minority",
            "vote_twice",
            "slow_elections",
            "lazy_pipeline",
            "skip_recovery",
        ):
            if getattr(config.unsafe, name):
                flags.append(f"--plant {name}")
        for name in ("silent_loss", "small_windows", "wipe_rejoining"):
            if getattr(config, name):
                flags.append("--" + name.replace("_", "-"))
        if not config.rollbacks:
            flags.append("--no-rollbacks")
        lines = [
            f"VIOLATION seed={self.seed} check={self.check} step={self.step}: {self.detail}",
            f"  replay: python -m raftlog.sim {' '.join(flags)}",
            "  last trace lines:",
        ]
        lines.extend(f"    {t}" for t in self.trace)
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class SimResult:
    """The outcome of one seed: ``violation`` is None when every check held.

    ``trace_digest`` hashes the whole trace and ``state_digest`` the final state of every
    node: two runs of one seed must agree on both.
    """

    seed: int
    steps: int
    heal_steps: int
    violation: Violation | None
    trace_digest: str
    state_digest: str
    stats: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Params:
    """Per-seed knobs, all drawn from the seed."""

    faults: NetFaults
    heartbeat_tick: int
    disk_max: int
    snapshot_every: int
    keep_after_compact: int
    max_msg_bytes: int
    max_inflight_msgs: int
    max_uncommitted_bytes: int
    client_every: int
    fault_every: int
    torn: float


def draw_params(r: random.Random, *, small_windows: bool) -> Params:
    """Draw one seed's knobs (the order of draws is part of every seed's replay)."""
    max_delay = r.choice([2, 4, 8, 15])
    faults = NetFaults(
        drop=r.choice([0.0, 0.01, 0.05, 0.15]),
        duplicate=r.choice([0.0, 0.02, 0.1]),
        min_delay=1,
        max_delay=max_delay,
        slow=r.choice([0.0, 0.02, 0.05]),
        slow_factor=r.choice([3, 10]),
    )
    return Params(
        faults=faults,
        heartbeat_tick=r.randint(1, 3),
        disk_max=r.choice([2, 5, 12, 30]),
        snapshot_every=r.choice([4, 10, 30, 80]),
        keep_after_compact=r.choice([0, 0, 2, 10]),
        max_msg_bytes=r.choice([60, 200, 1 << 20]),
        max_inflight_msgs=r.choice([1, 4, 256] if small_windows else [256]),
        max_uncommitted_bytes=r.choice([300, 3000, 64 << 20]),
        client_every=r.choice([3, 8, 20]),
        fault_every=r.choice([80, 200, 500]),
        torn=r.choice([0.0, 0.5, 1.0]),
    )
