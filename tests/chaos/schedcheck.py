"""The scheduling checks of the API surfaces (`tests.chaos.apicheck.check_surfaces` runs them
over its deliveries): no delivery before its delay or ``deliver_at``, none after its time to
live ran out, no lease again before its retry back-off. Each judges real time against a
deadline, so each is `tests.chaos.apicheck.CLOCK_JUDGED`; ``delay_tolerance`` and ``ttl_slack``
are `check_surfaces`' parameters.

**Delays**: a message sent with ``delay_seconds = d`` must not be delivered before ``d`` has
passed since its first send attempt began, within ``delay_tolerance`` (the clock bound: a
queue's clock may run ahead of real time by the skew of a leader's clock). That every
confirmed one is delivered in the end is the `lost` check.

**Scheduled times** (docs/api.md, "Scheduled delivery"): a message sent with ``deliver_at`` must
not be delivered before that time. The workload records it on the runner's wall clock with the
wall clock at the send's start (``Op.wall``), so the checker puts it on the monotonic clock of
the history as ``start + (deliver_at - wall)`` and applies the delay rule to it. A node turns
``deliver_at`` into a delay with its own clock and stamps the send with the same reading, so
the proposer's skew cancels; what is left is the skew of the leader that leases it (and of the
queue's time, which never runs behind its leaders'), the same ``delay_tolerance`` as delays.
The runner's wall and monotonic clocks may drift apart by the kernel's slew (at most 500 ppm:
30 ms in a minute), well inside it.

**Times to live** (docs/api.md, "Time to live"): a message sent with ``ttl_seconds = t`` is
never delivered once ``t`` has passed since its send. Its deadline is stamped when the send is
applied, no later than the end of its first confirmed send attempt (a later resend is
deduplicated), so it is surely past at ``end + t``; a delivery by a receive that *began* more
than ``ttl_slack`` after that is late (the lease was stamped after the receive began). The
slack covers the clocks: the deadline's stamp may run ahead of real time and the leasing
leader's clock behind, each by at most the 500 ms bound, so the default is 1 s. Keys whose send
was never confirmed are not judged (an unknown attempt may be applied at any later time). A
message with a time to live may expire unseen: such keys are counted (``expired_unseen``), and
`tests.chaos.checker` leaves them out of ``lost``; every confirmed message *without* a time to
live must still be delivered.

**Retry back-off** (docs/api.md, "Retry back-off"): on a queue with ``retry`` a lease with
``receive_count = n`` that expires or is nacked makes its message visible again only
``initial * multiplier^(n-1)`` seconds (at most ``max``) after the lease's deadline or the
nack. The lease's deadline is no earlier than its receive's start plus the visibility, the nack
no earlier than its start (a nack with its own delay: the longer of the two waits), so the
lease ``n + 1`` must not come from a receive that ended
before ``min(start + visibility, nack start) + back-off(n) - delay_tolerance``. Only leases
``n`` and ``n + 1`` both seen are judged (a receive whose answer was lost hides its lease).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tests.chaos.history import Op

if TYPE_CHECKING:
    from tests.chaos.apicheck import QueueInfo, Seen, SurfaceReport


# -- delays ----------------------------------------------------------------------------------------
def check_delays(ops: Sequence[Op], seen: list[Seen], rep: SurfaceReport, tol: float) -> None:
    """No delivery before a send's delay or ``deliver_at`` (module doc)."""
    due: dict[str, float] = {}
    scheduled: set[str] = set()
    for op in ops:
        if op.kind != "send":
            continue
        for k, d in zip(op.keys, op.delays, strict=False):
            if d > 0:
                due[k] = min(due.get(k, op.start + d), op.start + d)
        for k, at in zip(op.keys, op.deliver_at, strict=False):
            if at > 0:  # the wall-clock time on the history's monotonic clock
                t = op.start + (at - op.wall)
                due[k] = min(due.get(k, t), t)
                scheduled.add(k)
    for s in seen:
        if s.key not in due:
            continue
        rep.delayed_deliveries += 1
        rep.scheduled_deliveries += s.key in scheduled
        if s.end < due[s.key] - tol:
            rep.early_deliveries.append(
                f"{s.queue}/{s.seq} ({s.key}): delivered by receive op {s.receive_op} ending at "
                f"{s.end:.3f}, {due[s.key] - s.end:.3f}s before its delay had passed"
            )


def ttl_keys(ops: Sequence[Op]) -> set[str]:
    """Keys sent with a time to live (they may expire unseen: not lost)."""
    return {
        k
        for op in ops
        if op.kind == "send"
        for k, t in zip(op.keys, op.ttls, strict=False)
        if t > 0
    }


def check_ttls(ops: Sequence[Op], seen: list[Seen], rep: SurfaceReport, slack: float) -> None:
    """No delivery after a time to live ran out (module doc)."""
    deadline: dict[str, float] = {}
    for op in ops:
        if op.kind != "send" or op.outcome != "ok":
            continue
        for k, t in zip(op.keys, op.ttls, strict=False):
            if t > 0:
                deadline[k] = min(deadline.get(k, op.end + t), op.end + t)
    delivered = set()
    for s in seen:
        if s.key not in deadline:
            continue
        delivered.add(s.key)
        rep.ttl_deliveries += 1
        if s.start > deadline[s.key] + slack:
            rep.late_ttl_deliveries.append(
                f"{s.queue}/{s.seq} ({s.key}): delivered by receive op {s.receive_op} that began "
                f"at {s.start:.3f}, {s.start - deadline[s.key]:.3f}s after its time to live ran "
                f"out (at the latest {deadline[s.key]:.3f})"
            )
    rep.expired_unseen = len(deadline.keys() - delivered)


def backoff(policy: tuple[float, float, float], receive_count: int) -> float:
    """The back-off (seconds) after a lease with ``receive_count`` ends: ``initial *
    multiplier^(receive_count - 1)``, at most ``max`` (docs/api.md)."""
    initial, multiplier, most = policy
    return float(min(most, initial * multiplier ** max(0, receive_count - 1)))


def check_backoff(
    ops: Sequence[Op],
    queues: dict[str, QueueInfo],
    seen: list[Seen],
    rep: SurfaceReport,
    tol: float,
) -> None:
    """No lease ``n + 1`` before lease ``n``'s release plus its back-off (module doc)."""
    policies = {q: info.retry for q, info in queues.items() if info.retry}
    if not policies:
        return
    nacked: dict[str, tuple[float, float]] = {}
    for op in ops:
        if op.kind == "nack":
            for r in op.receipts:
                nacked[r] = min(nacked.get(r, (op.start, op.delay)), (op.start, op.delay))
    visibility = {op.index: op.visibility for op in ops if op.kind == "receive"}
    by_msg: dict[tuple[str, int], dict[int, Seen]] = defaultdict(dict)
    for s in seen:
        if s.queue in policies:
            by_msg[(s.queue, s.seq)].setdefault(s.receive_count, s)
    for (queue, seq), leases in sorted(by_msg.items()):
        for n, prev in sorted(leases.items()):
            nxt = leases.get(n + 1)
            if nxt is None:
                continue
            rep.retried += 1
            released = prev.start + visibility[prev.receive_op]
            wait = backoff(policies[queue], n)
            if prev.receipt in nacked:  # back after the nack, or its own delay if longer
                at, delay = nacked[prev.receipt]
                if at < released:
                    released, wait = at, max(wait, delay)
            if nxt.end < released + wait - tol:
                rep.early_retries.append(
                    f"{queue}/{seq} ({prev.key}): lease {n + 1} by receive op {nxt.receive_op} "
                    f"ended at {nxt.end:.3f}, {released + wait - nxt.end:.3f}s before lease "
                    f"{n}'s release (>= {released:.3f}) plus its back-off ({wait:g}s)"
                )
