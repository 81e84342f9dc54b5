"""The queue under the deterministic simulator, and proof that its checks catch planted bugs."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import ClassVar

import pytest
from pyroaring import BitMap

from cmq.fsm.commands import Ack, CreateQueue, EntryOutcomes, Produce, Rewind
from cmq.fsm.machine import QueueMachine
from raftlog.sim.runtime_sim import RuntimeSimConfig, run_runtime_seed
from tests.queuesim.clock import ClockStepSim, FrozenClockSim
from tests.queuesim.fair import FairMachine, FairQueueSim
from tests.queuesim.plants import StoresProducesOtherwise
from tests.queuesim.priority import ObservedMachine, PriorityQueueSim
from tests.queuesim.retry import RetryQueueSim
from tests.queuesim.rewind import RewindQueueSim
from tests.queuesim.schedule import ScheduleQueueSim
from tests.queuesim.sim import QueueSim, run_queue_seed
from tests.seeds import QUEUE, rotating_seeds

SEEDS = int(os.environ.get("QUEUE_SIM_SEEDS", "8"))
pytestmark = pytest.mark.usefixtures("quiet_logging")


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [3, 5])
def test_queue_guarantees_hold_under_faults(nodes: int) -> None:
    cfg = RuntimeSimConfig(nodes=nodes, seconds=15.0)
    confirmed = 0
    for seed in rotating_seeds(f"queue-{nodes}", SEEDS // 2, QUEUE):
        r = run_queue_seed(seed, cfg)
        assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
        confirmed += r.acked
    assert confirmed > 500 * (SEEDS // 2)


class _AckThatDeletesNothing(QueueMachine):
    """Planted bug: acks report success but the message stays."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        if isinstance(cmd, Ack):
            return EntryOutcomes(tuple(None for _ in cmd.entries))
        return super().execute(cmd)


class _BrokenAckSim(QueueSim):
    machine_class = _AckThatDeletesNothing


def test_checker_catches_redelivery_after_ack() -> None:
    r = run_runtime_seed(1, RuntimeSimConfig(seconds=10.0), _BrokenAckSim)
    assert any("after its ack was committed" in v for v in r.violations), r.violations[:3]


def test_checker_catches_acknowledging_before_fsync() -> None:
    cfg = RuntimeSimConfig(seconds=15.0, unsafe_early_ack=True)
    assert any(run_queue_seed(s, cfg).violations for s in range(12))


def test_drain_waits_for_leases_whose_answer_was_lost() -> None:
    """Seed 5000048: after two whole-cluster crashes, ten confirmed messages sit under leases
    whose receive answers were lost. The drain ends only once the leader's own state shows
    nothing visible, delayed or leased, so it waits for those leases to expire instead of
    reporting the messages as lost after three empty receives."""
    r = run_queue_seed(5000048, RuntimeSimConfig(nodes=3, seconds=20.0))
    assert not r.violations, (r.violations[:3], r.trace[-15:])


class _ProduceThatForgetsOne(QueueMachine):
    """Planted bug: a batch of several messages is confirmed but its last one is not stored."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        if isinstance(cmd, Produce) and len(cmd.messages) > 1:
            kept = replace(cmd, messages=cmd.messages[:-1])
            return super().execute(kept)
        return super().execute(cmd)


class _LosingSim(QueueSim):
    machine_class = _ProduceThatForgetsOne


def test_checker_catches_a_lost_confirmed_message() -> None:
    r = run_runtime_seed(2, RuntimeSimConfig(seconds=8.0), _LosingSim)
    assert any("confirmed messages never delivered" in v for v in r.violations), r.violations[:3]


def test_one_clock_two_hours_ahead_does_not_freeze_the_queue() -> None:
    """A node's clock runs two hours ahead for four seconds and its stamps get in. With the
    leaders' `Retime` every confirmed message is delivered in the drain; without it (the
    planted bug) the queue's leases wait for real time and the drain reports them lost."""
    cfg = RuntimeSimConfig(nodes=3, seconds=12.0)
    # Seeds whose clusters commit sends during the step (with seed 2 too few commit then for
    # the planted bug to show).
    seeds = (3, 4)
    for seed in seeds:
        r = run_runtime_seed(seed, cfg, ClockStepSim)
        assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
        assert r.acked > 100
    frozen = [run_runtime_seed(s, cfg, FrozenClockSim) for s in seeds]
    assert all(
        any("confirmed messages never delivered" in v for v in r.violations) for r in frozen
    ), [r.violations[:2] for r in frozen]


@pytest.mark.slow
def test_retry_back_off_holds_under_faults() -> None:
    cfg = RuntimeSimConfig(nodes=3, seconds=12.0)
    for seed in (11, 12):
        r = run_runtime_seed(seed, cfg, RetryQueueSim)
        assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
        assert r.acked > 100


class _IgnoresRetryPolicies(QueueMachine):
    """Planted bug: queues are created without their retry policy (expired leases come back
    at once)."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        if isinstance(cmd, CreateQueue):
            cmd = replace(cmd, attributes=replace(cmd.attributes, retry=None))
        return super().execute(cmd)


class _NoBackOffSim(RetryQueueSim):
    machine_class = _IgnoresRetryPolicies


def test_checker_catches_redelivery_before_the_back_off() -> None:
    r = run_runtime_seed(11, RuntimeSimConfig(nodes=3, seconds=8.0), _NoBackOffSim)
    assert any("before its back-off" in v for v in r.violations), r.violations[:3]


def test_scheduled_messages_are_never_delivered_early_under_faults() -> None:
    r = run_runtime_seed(21, RuntimeSimConfig(nodes=3, seconds=8.0), ScheduleQueueSim)
    assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
    assert r.acked > 100


class _IgnoresDelays(QueueMachine):
    """Planted bug: a send's messages are stored without their delays (visible at once)."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        if isinstance(cmd, Produce):
            messages = tuple(replace(m, delay_ms=None) for m in cmd.messages)
            cmd = replace(cmd, messages=messages, tails=None)
        return super().execute(cmd)


class _EarlySim(ScheduleQueueSim):
    machine_class = _IgnoresDelays


def test_checker_catches_a_delivery_before_the_delay() -> None:
    r = run_runtime_seed(21, RuntimeSimConfig(nodes=3, seconds=6.0), _EarlySim)
    assert any("before its delay ran out" in v for v in r.violations), r.violations[:3]


class _IgnoresTtl(QueueMachine):
    """Planted bug: a send's messages are stored without their times to live."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        if isinstance(cmd, Produce):
            messages = tuple(replace(m, ttl_ms=None) for m in cmd.messages)
            cmd = replace(cmd, messages=messages)
        return super().execute(cmd)


class _ImmortalSim(ScheduleQueueSim):
    machine_class = _IgnoresTtl


def test_checker_catches_a_delivery_after_the_ttl() -> None:
    r = run_runtime_seed(21, RuntimeSimConfig(nodes=3, seconds=6.0), _ImmortalSim)
    assert any("after its ttl" in v for v in r.violations), r.violations[:3]


@pytest.mark.slow
def test_a_restored_segment_of_copies_keeps_their_first_visibility() -> None:
    """Seed 827151 (5 nodes, retry back-off): a replica that restored a snapshot holding a
    segment of messages copied forward forgot those copies' first visibility (kept live for a
    segment with copies, dropped on restore when every record's equaled its send time), so a
    later copy forward wrote other bytes there and the replicas' images differed."""
    r = run_runtime_seed(827151, RuntimeSimConfig(nodes=5, seconds=20.0), RetryQueueSim)
    assert not r.violations, (r.violations[:3], r.trace[-15:])


def test_priority_order_holds_under_faults() -> None:
    r = run_runtime_seed(31, RuntimeSimConfig(nodes=3, seconds=8.0), PriorityQueueSim)
    assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
    assert r.acked > 100


class _IgnoresPriorities(StoresProducesOtherwise, ObservedMachine):
    """Planted bug: a send's messages are stored without their priorities (the observer sees
    the command as proposed)."""

    def stored(self, cmd: Produce) -> Produce:
        return replace(cmd, messages=tuple(replace(m, priority=0) for m in cmd.messages))


class _UnorderedSim(PriorityQueueSim):
    machine_class = _IgnoresPriorities


def test_checker_catches_a_lease_out_of_priority_order() -> None:
    r = run_runtime_seed(31, RuntimeSimConfig(nodes=3, seconds=6.0), _UnorderedSim)
    assert any("priority order" in v for v in r.violations), r.violations[:3]


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [3, 5])
def test_rewinds_hold_under_faults(nodes: int) -> None:
    cfg = RuntimeSimConfig(nodes=nodes, seconds=15.0)
    for seed in rotating_seeds(f"rewind-{nodes}", SEEDS // 4, QUEUE):
        r = run_runtime_seed(seed, cfg, RewindQueueSim)
        assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])


def test_rewinds_deliver_each_retained_message_once_more() -> None:
    r = run_runtime_seed(3, RuntimeSimConfig(nodes=3, seconds=20.0), _CountingRewindSim)
    assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
    assert _CountingRewindSim.seen["fresh"] > 10 and _CountingRewindSim.seen["expected"] > 10
    assert _CountingRewindSim.seen["archived"] > 100  # kept segments were archived meanwhile


class _CountingRewindSim(RewindQueueSim):
    seen: ClassVar[dict[str, int]] = {}

    async def final_checks(self) -> None:
        await super().final_checks()
        recs = [r for rs in self.rewinds.values() for r in rs]
        _CountingRewindSim.seen = {
            "fresh": sum(self.fresh.values()),
            "expected": sum(len(r.expect) for r in recs),
            "archived": len(self.archived),
        }


class _RewindIgnoresSince(QueueMachine):
    """Planted bug: a rewind brings back every retained message, whatever its ``since``."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        if isinstance(cmd, Rewind):
            cmd = replace(cmd, since_ms=0)
        return super().execute(cmd)


class _EverythingSim(RewindQueueSim):
    machine_class = _RewindIgnoresSince


def test_checker_catches_a_rewind_that_brings_back_older_messages() -> None:
    r = run_runtime_seed(3, RuntimeSimConfig(nodes=3, seconds=8.0), _EverythingSim)
    assert any("delivered again after its ack" in v for v in r.violations), r.violations[:3]


class _RewoundCopiesArchived(QueueMachine):
    """Planted bug: rewound copies are not marked, so the archive writes them again."""

    def execute(self, cmd):  # type: ignore[no-untyped-def]
        res = super().execute(cmd)
        if isinstance(cmd, Rewind):
            q = self._queues[cmd.queue]
            for seg in q.segments:
                seg.replays = BitMap()
        return res


class _ArchivedTwiceSim(RewindQueueSim):
    machine_class = _RewoundCopiesArchived


def test_checker_catches_a_rewound_message_archived_twice() -> None:
    r = run_runtime_seed(6, RuntimeSimConfig(nodes=3, seconds=20.0), _ArchivedTwiceSim)
    assert any("archived twice" in v for v in r.violations), r.violations[:3]


def test_the_fairness_bound_holds_under_faults() -> None:
    r = run_runtime_seed(31, RuntimeSimConfig(nodes=3, seconds=8.0), FairQueueSim)
    assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
    assert r.acked > 100


class _IgnoresTenants(StoresProducesOtherwise, FairMachine):
    """Planted bug: a send's messages are stored without their group ids (the observer sees
    the command as proposed), so the heavy tenant's backlog is served in seq order."""

    def stored(self, cmd: Produce) -> Produce:
        return replace(cmd, messages=tuple(replace(m, group_id=None) for m in cmd.messages))


class _UnfairSim(FairQueueSim):
    machine_class = _IgnoresTenants


def test_checker_catches_a_lease_over_the_fairness_bound() -> None:
    r = run_runtime_seed(31, RuntimeSimConfig(nodes=3, seconds=6.0), _UnfairSim)
    assert any("fairness" in v for v in r.violations), r.violations[:3]
