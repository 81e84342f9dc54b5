"""A whole-node simulation run's shape (`NodeSimConfig`: what is not set is drawn from the seed)
and its record (`NodeSimResult`: what it did and found, its digest, the command that replays
it); `tests.nodesim.sim` runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class NodeSimConfig:
    """One run's shape; what is not set here is drawn from the seed."""

    nodes: int = 3
    seconds: float = 12.0
    """Virtual seconds of workload under faults."""
    groups: int | None = None
    """Data groups (None: 1 or 2, drawn from the seed)."""
    producers: int = 3
    consumers: int = 3
    fifo: bool = True
    """Also a FIFO queue."""
    faults: bool = True
    buggify: bool = True
    heal_seconds: float = 15.0
    """After healing: how long every group may take to answer again."""
    drain_seconds: float = 60.0
    plant: str | None = None
    """A planted bug (`tests.nodesim.plants`)."""
    rot: bool = False
    """Sealed segments of running nodes rot now and then (a flipped byte): the node's scrubber
    finds it and the replica is repaired from its peers (`raftlog.runtime.repair`)."""
    rewind: bool = False
    """A queue that keeps acknowledged messages, rewound every 1-2 s (`tests.nodesim.workload`),
    judged by the chaos checker's rewind rules (`tests.chaos.rewindcheck`)."""
    failover: bool = False
    """Single-node faults only, one at a time, and a prober measuring, per fault, the time
    until every data group confirms a fresh send again (`tests.nodesim.failover`); the fault
    points are off in this mode."""
    failover_bound: float = 1.5
    """Seconds (``failover``): a fault whose recovery takes longer is a violation."""
    clock_leaps: bool = False
    """Every clock step is a leap two hours ahead on a node leading some group: the fault the
    clock guard exists for, made the common case (the ``unguarded_clock`` plant's run)."""


@dataclass(slots=True)
class NodeSimResult:
    seed: int
    cfg: NodeSimConfig
    violations: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    ops: int = 0
    confirmed: int = 0
    """Messages whose send was confirmed."""
    acked: int = 0
    """Messages whose ack was confirmed."""
    deliveries: int = 0
    unknown: int = 0
    crashes: int = 0
    power_losses: int = 0
    pauses: int = 0
    partitions: int = 0
    clock_steps: int = 0
    rots: int = 0
    """Segment files damaged (``NodeSimConfig.rot``)."""
    repaired: int = 0
    """Of those, replicas the scrubber found and that were repaired from their peers."""
    rewinds: int = 0
    """Rewind requests (``NodeSimConfig.rewind``), whatever their outcome."""
    rewound: int = 0
    """Messages the ok rewinds said they brought back."""
    copies_allowed: int = 0
    """Redeliveries after an ack the rewind rules allowed (per key, the rewinds covering it)."""
    copies: int = 0
    """Redeliveries after an ack seen (fresh deliveries of rewound copies)."""
    buggified: dict[str, int] = field(default_factory=dict)
    digest: str = ""
    """A hash of the whole history and trace: equal for equal runs."""
    virtual_seconds: float = 0.0
    failovers: list[tuple[str, float]] = field(default_factory=list)
    """(``NodeSimConfig.failover``) per fault, its kind and the seconds until every data group
    confirmed a fresh send again (inf: one never did)."""

    def replay(self) -> str:
        """The command that runs this seed again (the options `python -m tests.nodesim`
        has; a configuration it cannot express is named after it)."""
        cfg = self.cfg
        cmd = (
            f"PYTHONHASHSEED=0 python -m tests.nodesim --seeds 1 --seed {self.seed} "
            f"--nodes {cfg.nodes} --seconds {cfg.seconds:g}"
        )
        if cfg.plant:
            cmd += f" --plant {cfg.plant}"
        if not cfg.buggify:
            cmd += " --no-buggify"
        if cfg.rot:
            cmd += " --rot"
        if cfg.rewind:
            cmd += " --rewind"
        if cfg.failover:
            cmd += " --failover"
        if cfg.clock_leaps:
            cmd += " --clock-leaps"
        rest = NodeSimConfig(
            nodes=cfg.nodes,
            seconds=cfg.seconds,
            plant=cfg.plant,
            buggify=cfg.buggify,
            rot=cfg.rot,
            rewind=cfg.rewind,
            failover=cfg.failover,
            clock_leaps=cfg.clock_leaps,
        )
        return cmd if rest == cfg else f"{cmd}  # with {cfg}"
