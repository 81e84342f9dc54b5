"""Bugs planted in the node for one simulated run, each a context manager that patches the
product's code (test-only: nothing in the product reads a switch). The whole-node simulator
must catch every one of them (`tests/nodesim/test_node_sim.py`).

========================  =========================================================================
name                      the bug
========================  =========================================================================
``early_ack``             the log disks report a write durable before it is synced (and sync it
                          1-3 s later, a log that fsyncs on a timer): a power loss of every node
                          loses what a majority acknowledged
                          (`raftlog.storage.memory.MemoryDiskOptions.unsafe_early_ack`, the queue
                          simulator's planted bug; set on the disks, not patched)
``ack_deletes_nothing``   an ack is answered "done" but deletes nothing (the queue simulator's)
``produce_forgets_one``   a send of several messages is confirmed, its last message not stored
                          (the queue simulator's)
``retry_unknown_sends``   the router resends a send without dedup ids after an attempt whose
                          outcome is unknown (a leader change, a forwarded call unanswered): a
                          message may be stored twice. Only the whole node can show it: the
                          router, the forwarding and the unknown outcomes of real attempts.
``unguarded_clock``       the clock guard trusts every clock: a node whose clock steps hours
                          ahead stamps leases and sends with it while it leads, which ends every
                          lease of its queues at once (two leases per message). Only the whole
                          node can show it: per-node clocks, the guard, leadership and stamps.
``merge_drops_a_send``    the leader merges several sends into one `Produce` without the last one's
                          messages and answers that send with the first one's confirms
                          (`cmq.routing.coalesce`): confirmed, never stored. Only the whole node
                          can show it: concurrent sends meeting at a leader.
``rewind_ignores_since``  a rewind brings back every retained acknowledged message, whatever its
                          ``since`` (the queue simulator's planted bug, here through the real
                          HTTP-less service calls, routing and parts); needs ``--rewind``
``rewind_copies_twice``   a rewind appends two copies of each message it brings back (so it is
                          delivered twice more, and the count answered says so); needs
                          ``--rewind``
========================  =========================================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any
from unittest import mock

from cmq.fsm import rewind
from cmq.fsm.commands import Ack, EntryOutcomes, Produce, Rewind
from cmq.fsm.machine import QueueMachine
from cmq.node import queue_node
from cmq.node.clockguard import ClockGuard
from cmq.routing.ops import LeaderOps
from cmq.routing.rpc import ProduceCall

PLANTS = (
    "early_ack",
    "ack_deletes_nothing",
    "produce_forgets_one",
    "retry_unknown_sends",
    "unguarded_clock",
    "merge_drops_a_send",
    "rewind_ignores_since",
    "rewind_copies_twice",
)
REWIND_PLANTS = ("rewind_ignores_since", "rewind_copies_twice")
"""The plants only a run with rewinds (``NodeSimConfig.rewind``) can show."""


class _AckThatDeletesNothing(QueueMachine):
    def execute(self, cmd: Any) -> Any:
        if isinstance(cmd, Ack):
            return EntryOutcomes(tuple(None for _ in cmd.entries))
        return super().execute(cmd)


class _ProduceThatForgetsOne(QueueMachine):
    def execute(self, cmd: Any) -> Any:
        if isinstance(cmd, Produce) and len(cmd.messages) > 1:
            return super().execute(replace(cmd, messages=cmd.messages[:-1]))
        return super().execute(cmd)


class _RewindIgnoresSince(QueueMachine):
    def execute(self, cmd: Any) -> Any:
        if isinstance(cmd, Rewind):
            return super().execute(replace(cmd, since_ms=0))
        return super().execute(cmd)


_copy_once = rewind._Copier.copy


def _copy_twice(self: Any, msg: Any, old: int) -> None:
    _copy_once(self, msg, old)
    _copy_once(self, msg, old)


def _always(self: object) -> bool:
    del self
    return True


def _unguarded_stamp(self: ClockGuard) -> int | None:
    return self._wall_ms()


def _machine(cls: type[QueueMachine]) -> Any:
    """Data groups opened meanwhile run ``cls``."""
    return mock.patch.object(queue_node, "QueueMachine", cls)


_propose_sends = LeaderOps._propose_sends


async def _propose_dropping_the_last(
    self: LeaderOps, group: int, queue: str, parts: list[Any]
) -> Any:
    if len(parts) < 2:
        return await _propose_sends(self, group, queue, parts)
    got = await _propose_sends(self, group, queue, parts[:-1])
    if isinstance(got, list):  # refused whole, then send by send: left as it is
        return [*got, got[0]]
    return (*got, *([got[0]] * parts[-1].count))  # the first send's first confirm, repeated


@contextmanager
def planted(name: str | None) -> Iterator[None]:
    """Plant bug ``name`` (None: none) for the ``with`` block (``early_ack`` is set on the
    disks by the simulator: nothing to patch here)."""
    if name is not None and name not in PLANTS:
        raise ValueError(f"unknown planted bug {name!r}; known: {', '.join(PLANTS)}")
    with ExitStack() as stack:
        if name == "ack_deletes_nothing":
            stack.enter_context(
                mock.patch.object(queue_node, "QueueMachine", _AckThatDeletesNothing)
            )
        elif name == "produce_forgets_one":
            stack.enter_context(
                mock.patch.object(queue_node, "QueueMachine", _ProduceThatForgetsOne)
            )
        elif name == "retry_unknown_sends":
            stack.enter_context(mock.patch.object(ProduceCall, "retry_unknown", _always))
        elif name == "rewind_ignores_since":
            stack.enter_context(_machine(_RewindIgnoresSince))
        elif name == "rewind_copies_twice":
            stack.enter_context(mock.patch.object(rewind._Copier, "copy", _copy_twice))
        elif name == "merge_drops_a_send":
            stack.enter_context(
                mock.patch.object(LeaderOps, "_propose_sends", _propose_dropping_the_last)
            )
        elif name == "unguarded_clock":
            stack.enter_context(mock.patch.object(ClockGuard, "stamp", _unguarded_stamp))
            stack.enter_context(mock.patch.object(ClockGuard, "trusted", _always))
        yield
