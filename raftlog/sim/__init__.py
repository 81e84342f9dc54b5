"""Deterministic, seeded simulation of raftlog groups over the real core (raftlog/sim/README.md).

`run_seed` runs N nodes x G groups with a lossy network (`SimNetwork`), crashing disks
(`SimDisk`), clients, membership changes and leadership transfers, checking Raft's safety
properties after every step (`Checker`) and liveness after the faults heal. The same seed
replays to the same trace. ``python -m raftlog.sim --help`` runs many seeds.

`raftlog.sim.runtime_sim` and `raftlog.sim.quiesce_sim` (not imported here) run real
`MultiRaft` hosts over the in-memory twins of their I/O on a virtual-time loop (`vloop`).
"""

from raftlog.sim.checker import Ack, Checker, SafetyViolation
from raftlog.sim.disk import (
    CrashOutcome,
    EntriesRecord,
    HardStateRecord,
    Record,
    RecoveryOutcome,
    SimDisk,
    SnapshotRecord,
    StoredRecord,
)
from raftlog.sim.network import PERFECT, Envelope, NetFaults, SendOutcome, SimNetwork
from raftlog.sim.node import ChainStateMachine, NodeHost, SimNode, chain_digest
from raftlog.sim.outcome import SimConfig, SimResult, Violation
from raftlog.sim.run import Summary, run_seed, run_seeds
from raftlog.sim.simulation import TICK, Simulation

__all__ = [
    "PERFECT",
    "TICK",
    "Ack",
    "ChainStateMachine",
    "Checker",
    "CrashOutcome",
    "EntriesRecord",
    "Envelope",
    "HardStateRecord",
    "NetFaults",
    "NodeHost",
    "Record",
    "RecoveryOutcome",
    "SafetyViolation",
    "SendOutcome",
    "SimConfig",
    "SimDisk",
    "SimNetwork",
    "SimNode",
    "SimResult",
    "Simulation",
    "SnapshotRecord",
    "StoredRecord",
    "Summary",
    "Violation",
    "chain_digest",
    "run_seed",
    "run_seeds",
]
