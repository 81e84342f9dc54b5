"""The queue simulation with message priorities: on top of `tests.queuesim.sim`'s checks
(identical replica images included, so the levels must agree between a replica that replayed
the log and one restored from a snapshot), strict priority order.

The rule: a `Lease` never hands out a message of level L while a message of a level above L
was ready when that command applied (sent, its delay over, not leased or its lease run out,
not acked) and the lease did not take it. Checked where the order is decided, at apply: every
replica's machine carries an observer (`PriorityObserver`) that follows the queue from the
commands and their results alone (levels from the `Produce` messages, readiness from the queue
clock, lease deadlines and ack outcomes), never from the machine's own index. A replica restored
from a snapshot stops observing (it has not seen the commands before it); the others apply
every entry. Producers send levels 0-3 at random, some with a short delay.
``python -m tests.queuesim --priority --seeds N`` runs seeds.
"""

from __future__ import annotations

from cmq.fsm.commands import NewMessage
from cmq.model import QueueAttributes
from tests.queuesim.observed import ObservedQueueSim, ObservingMachine, ReadyObserver

LEVELS = 4
DELAYS_MS = (None, None, 0, 200)


class PriorityObserver(ReadyObserver[int]):
    """Follows one queue machine's queues from its commands and results, each message labeled
    with its level (see the module docstring); reports a lease out of priority order to
    ``violation``."""

    def label_of(self, msg: NewMessage) -> int:
        return msg.priority

    def check_lease(self, queue: str, clock: int, leased: list[str]) -> None:
        levels = self.label.get(queue, {})
        visible = self.visible_at.get(queue, {})
        taken = set(leased)
        waiting = [
            (levels[mid], mid)
            for mid, at in visible.items()
            if at <= clock and mid not in taken and mid in levels
        ]
        best = max(waiting, default=None)
        for mid in leased:
            level = levels.get(mid)
            if level is not None and best is not None and best[0] > level:
                self.violation(
                    f"{mid} (level {level}) leased at {clock} while {best[1]} (level "
                    f"{best[0]}) was ready"
                )
                break


class ObservedMachine(ObservingMachine):
    """A `QueueMachine` with a `PriorityObserver` on every command it executes (until it is
    restored from a snapshot)."""

    observer_class = PriorityObserver


class PriorityQueueSim(ObservedQueueSim):
    """`QueueSim` over queues with 4 priority levels, checking strict priority order."""

    machine_class = ObservedMachine
    rule = "priority order"

    def attributes(self) -> QueueAttributes:
        return QueueAttributes(archive=True, priorities=LEVELS)

    def new_message(self, mid: str) -> NewMessage:
        delay = self.rng.choice(DELAYS_MS)
        level = self.rng.randrange(LEVELS)
        return NewMessage(mid, mid.encode() * 8, False, (), delay, None, None, None, level)
