"""The FIFO queue under the deterministic simulator, and proof that its FIFO checks catch
planted bugs (a machine that ignores the group block, one that forgets dedup ids)."""

from __future__ import annotations

import os

import pytest

from cmq.fsm.commands import Lease, Produce
from cmq.fsm.machine import QueueMachine
from raftlog.sim.runtime_sim import RuntimeSimConfig, run_runtime_seed
from tests.queuesim.fifo import FifoQueueSim, run_fifo_seed
from tests.seeds import QUEUE, rotating_seeds

SEEDS = int(os.environ.get("QUEUE_SIM_SEEDS", "8"))
pytestmark = pytest.mark.usefixtures("quiet_logging")


def test_fifo_guarantees_hold_under_faults() -> None:
    cfg = RuntimeSimConfig(nodes=3, seconds=10.0)
    confirmed = 0
    for seed in rotating_seeds("fifo", max(2, SEEDS // 4), QUEUE):
        r = run_fifo_seed(seed, cfg)
        assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
        confirmed += r.acked
    assert confirmed > 200


class _NoGroupBlock(QueueMachine):
    """Planted bug: FIFO leases ignore message groups (plain seq order, as a standard queue)."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        q = self._queues.get(cmd.queue) if isinstance(cmd, Lease) else None
        if q is None or q.fifo is None:
            return super().execute(cmd)
        fifo, q.fifo = q.fifo, None
        try:
            return super().execute(cmd)
        finally:
            q.fifo = fifo


class _ForgetsDedup(QueueMachine):
    """Planted bug: every send forgets the dedup ids seen so far."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        q = self._queues.get(cmd.queue) if isinstance(cmd, Produce) else None
        if q is not None:
            q.dedup.clear()
        return super().execute(cmd)


class _NoBlockSim(FifoQueueSim):
    machine_class = _NoGroupBlock


class _NoDedupSim(FifoQueueSim):
    machine_class = _ForgetsDedup


def test_checker_catches_a_skipped_group_block() -> None:
    r = run_runtime_seed(1, RuntimeSimConfig(seconds=6.0), _NoBlockSim)
    assert any("leased while another of its group" in v for v in r.violations), r.violations[:3]


def test_checker_catches_a_forgotten_dedup_id() -> None:
    r = run_runtime_seed(1, RuntimeSimConfig(seconds=6.0), _NoDedupSim)
    assert any("enqueued twice" in v for v in r.violations), r.violations[:3]
