"""The queue simulation with a retry back-off on every queue (`cmq.model.RetryPolicy`): on top
of `tests.queuesim.sim`'s checks, a message whose lease expired is never leased again before
the lease's deadline plus the policy's delay for its receive count.

The consumers' leases (0.3 s or 2 s, 80 % acked) expire often, so messages come back after 1,
2 and then 4 s; the drain waits for them like for any delayed message.
``python -m tests.queuesim --retry --seeds N`` runs more seeds.
"""

from __future__ import annotations

from cmq.model import QueueAttributes, RetryPolicy
from tests.queuesim.sim import QueueSim

POLICY = RetryPolicy(initial_seconds=1, multiplier=2.0, max_seconds=4)


class RetryQueueSim(QueueSim):
    """`QueueSim` over queues with `POLICY`."""

    def attributes(self) -> QueueAttributes:
        return QueueAttributes(archive=True, retry=POLICY)

    def redelivery_at(self, deadline: int, receive_count: int) -> int:
        return deadline + POLICY.delay_ms(receive_count)
