"""The ``tenants`` statistic (`QueueStats.tenants`): a standard queue's tenants with a message
ready to be received, the messages without a group id counted as one; 0 on a queue whose
messages never had a group id."""

from __future__ import annotations

from cmq.fsm import Ack, CreateQueue, Lease, MemorySegmentStore, NewMessage, Produce, QueueMachine
from cmq.fsm.commands import CommandFailed, Leased
from cmq.model import QueueAttributes

T0 = 1_700_000_000_000


def _send(m: QueueMachine, now: int, *tenants: str | None) -> None:
    msgs = tuple(
        NewMessage(f"m{now}-{i}", b"x", False, (), None, None, t) for i, t in enumerate(tenants)
    )
    assert not isinstance(m.execute(Produce("q", now, msgs)), CommandFailed)


def _tenants(m: QueueMachine, now: int) -> int:
    stats = m.stats("q", now)
    assert stats is not None
    return stats.tenants


def test_tenants_counts_the_tenants_with_a_ready_message() -> None:
    m = QueueMachine(MemorySegmentStore(indexes=True))
    assert m.execute(CreateQueue("q", QueueAttributes(visibility_timeout=30), T0)) is not None
    _send(m, T0, None, None)
    assert _tenants(m, T0) == 0  # no group id yet: no tenants at all
    _send(m, T0 + 1, "a", "a", "b")
    assert _tenants(m, T0 + 1) == 3  # a, b and the messages without a group id
    got = m.execute(Lease("q", T0 + 2, 3, 30_000))
    assert isinstance(got, Leased) and len(got.messages) == 3  # one of each, round-robin
    assert _tenants(m, T0 + 2) == 2  # b has nothing ready any more
    acks = tuple((x.seq, x.lease_id) for x in got.messages)
    assert not isinstance(m.execute(Ack("q", T0 + 3, acks)), CommandFailed)
    assert _tenants(m, T0 + 3) == 2
