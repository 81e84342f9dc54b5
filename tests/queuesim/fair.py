"""The queue simulation with fair queues: on top of `tests.queuesim.sim`'s checks (identical
replica images included, so the tenants and the fair cursor must agree between a replica that
replayed the log and one restored from a snapshot), the fairness bound.

The rule (`cmq.fsm.tenants`): a `Lease` serves the tenants round-robin, so while another
tenant has a ready message, no tenant gets more than `MAX_IN_A_ROW` (1) picks in a row, counted
over consecutive leases of the queue. A pick counts only when another tenant had a message ready
at it (sent, its delay over, not leased or its lease run out, not acked, not taken earlier in
the same lease); a pick with no other tenant ready resets the count. Checked at apply by an
observer on every replica's machine (`FairObserver`) that follows the queue from the commands and
their results alone (tenants from the `Produce` messages' group ids, readiness from the queue
clock, lease deadlines and ack outcomes); a replica restored from a snapshot stops observing.
Its readiness may lag the machine's (a nack it does not follow), which can only hide a
violation, never invent one. One producer tenant ("a") sends 70% of the messages, "b", "c"
and messages without a group id the rest. ``python -m tests.queuesim --fair --seeds N``.
"""

from __future__ import annotations

from collections.abc import Callable

from cmq.fsm.commands import NewMessage
from tests.queuesim.observed import ObservedQueueSim, ObservingMachine, ReadyObserver

MAX_IN_A_ROW = 1
TENANTS = ("a",) * 7 + ("b", "c", None)
DELAYS_MS = (None, None, 0, 200)


class FairObserver(ReadyObserver[str]):
    """Follows one queue machine's queues from its commands and results, each message labeled
    with its tenant ("" for none; see the module docstring); reports a run of picks over the
    bound to ``violation``."""

    def __init__(self, violation: Callable[[str], None]) -> None:
        super().__init__(violation)
        self.last: dict[str, tuple[str, int]] = {}  # queue -> (last tenant, its counted run)

    def label_of(self, msg: NewMessage) -> str:
        return msg.group_id or ""

    def check_lease(self, queue: str, clock: int, leased: list[str]) -> None:
        tenants = self.label.get(queue, {})
        visible = self.visible_at.get(queue, {})
        ready: dict[str, int] = {}  # tenant -> ready messages not yet taken
        for mid, at in visible.items():
            if at <= clock and mid in tenants:
                ready[tenants[mid]] = ready.get(tenants[mid], 0) + 1
        last, run = self.last.get(queue, ("", 0))
        for mid in leased:
            tenant = tenants.get(mid)
            if tenant is None:
                continue
            others = any(n for t, n in ready.items() if t != tenant)
            run = (run + 1 if tenant == last else 1) if others else 0
            if run > MAX_IN_A_ROW:
                waiting = sorted(t for t, n in ready.items() if n and t != tenant)
                self.violation(
                    f"{mid} leased at {clock}: tenant {tenant!r} got {run} picks in a row while "
                    f"tenants {waiting} had a ready message"
                )
            last = tenant
            if ready.get(tenant):
                ready[tenant] -= 1
        self.last[queue] = (last, run)


class FairMachine(ObservingMachine):
    """A `QueueMachine` with a `FairObserver` on every command it executes (until it is
    restored from a snapshot)."""

    observer_class = FairObserver


class FairQueueSim(ObservedQueueSim):
    """`QueueSim` over standard queues whose messages name tenants, checking the fairness
    bound."""

    machine_class = FairMachine
    rule = "fairness"
    max_batch = 6

    def new_message(self, mid: str) -> NewMessage:
        delay = self.rng.choice(DELAYS_MS)
        tenant = self.rng.choice(TENANTS)
        return NewMessage(mid, mid.encode() * 8, False, (), delay, None, tenant)
