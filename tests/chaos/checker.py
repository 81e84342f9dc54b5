"""Pure checks over a chaos history (Jepsen's total-queue plus the lease model of jepsen.queen).

Nothing here does I/O or reads a clock: `check` takes the operations, `check_replicas` the
``/v1/status`` documents of every node, and both return plain data.

Lease windows. A receive ``r`` that returned message ``m`` with visibility ``v`` holds a lease
committed no later than ``r.end``, whose deadline the leader fixed at ``stamp + v`` with
``r.start <= stamp <= r.end`` (the stamp is the leader's clock when it proposed the lease; the
queue clock never runs ahead of real time on one machine). So the lease *surely* covers
``[r.end, r.start + v)``, shortened to the start of a nack of that receipt if one was attempted
(a nack may have released it as early as it was sent). Two receives of one message whose sure
windows intersect held two unexpired leases at once: a violation of "one lease at a time".
Nodes stamp with the wall clock, the runner measures with the monotonic clock; ``tolerance``
absorbs their drift within one window (milliseconds).

Order of leases. Every lease of a message increments its ``receive_count`` (replicated state),
so the deliveries of one message are totally ordered by it. Two deliveries with the same count
are a *lease fork*: two leases granted from the same state (a committed lease was lost, or a
lease was returned before it committed). A delivery that follows (by count) a delivery whose
ack was confirmed is *redelivered after ack* whatever the timing: an ack applies only while its
lease is the current one, so a later lease of the message cannot exist. The timing rule of the
task (a receive that *started* after the ack was confirmed) is checked as well.

``duplicated`` (reported, not failed): keys delivered more than once without a redelivery
reason — stored under two seqs (the dedup window let a resend through), or delivered again
after a confirmed ack. Redeliveries after a nack or an expired or unacked lease are normal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from tests.chaos.apicheck import SurfaceReport, check_surfaces, moved_keys, ttl_keys
from tests.chaos.history import Op
from tests.chaos.rewindcheck import RewindReport, check_rewinds, findings, rewound_keys

MessageId = tuple[str, int]
"""(queue, seq): one stored message."""


@dataclass(frozen=True, slots=True)
class DeliveryEvent:
    """A message as one receive returned it, with the window its lease surely covered."""

    key: str
    queue: str
    seq: int
    receipt: str
    receive_count: int
    receive_op: int
    start: float
    end: float
    visibility: float
    sure_until: float
    nacked: bool


@dataclass(slots=True)
class PinnedReport:
    """Operations of clients pinned to one side of a partition (`check_pinned`)."""

    episodes: int = 0
    minority_ops: int = 0
    minority_refused: int = 0
    """Minority-side operations that got an error (failed or unknown): what they must get."""
    minority_empty_reads: int = 0
    """Minority-side receives answered ok with no message (nothing confirmed: not failed)."""
    minority_confirms: list[str] = field(default_factory=list)
    majority_ok: int = 0
    majority_stalled: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Report:
    """What `check` found. Lists hold examples (keys or op indexes) for the failure message."""

    ops: int = 0
    ops_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    attempted: int = 0
    acked: int = 0
    """Messages whose send was confirmed (at least one ok send)."""
    consumed: int = 0
    """Messages whose ack was confirmed."""
    deliveries: int = 0
    delivered: int = 0
    """Distinct keys delivered at least once."""
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    failed_delivered: list[str] = field(default_factory=list)
    """Delivered although every send of it was definitely refused (a 4xx changed something)."""
    duplicated: list[str] = field(default_factory=list)
    stored_twice: list[str] = field(default_factory=list)
    """Keys stored under two or more seqs: the dedup window let a retry through."""
    recovered: list[str] = field(default_factory=list)
    redelivered_after_ack: list[str] = field(default_factory=list)
    lease_overlaps: list[str] = field(default_factory=list)
    lease_forks: list[str] = field(default_factory=list)
    pinned: PinnedReport = field(default_factory=PinnedReport)
    """What the clients pinned to one side of a partition saw (`check_pinned`)."""
    surfaces: SurfaceReport = field(default_factory=SurfaceReport)
    """FIFO order, delays, dead-letter moves (`tests.chaos.apicheck`)."""
    rewind: RewindReport = field(default_factory=RewindReport)
    """Redeliveries after an ack on queues that keep acked messages (`tests.chaos.rewindcheck`)."""

    def failures(self) -> list[str]:
        """The failed checks, each with a count and a few examples."""
        out = findings(self, ("lost", "unexpected", "failed_delivered"), 5, ordered=True)
        out += findings(self, ("redelivered_after_ack", "lease_overlaps", "lease_forks"), 5)
        out += findings(self.pinned, ("minority_confirms",), 5)
        if self.pinned.majority_stalled:
            out.append(f"majority_stalled={self.pinned.majority_stalled[:5]}")
        return out + self.surfaces.failures() + self.rewind.failures()

    def notes(self) -> list[str]:
        """What is reported, not failed (keys delivered again without a reason, sends stored
        twice, the rewinds' notes), each with a count and a few examples."""
        return findings(self, ("duplicated", "stored_twice"), 5) + self.rewind.notes()

    @property
    def ok(self) -> bool:
        return not self.failures()


PINNED = "pinned"
"""Process names of pinned clients: ``pinned<episode>-<minority|majority>-<producer|consumer>``
(`tests.chaos.pinned`); every one of their operations started after the partition was in place
and ended before it was healed."""


def check_pinned(ops: Sequence[Op], *, progress_window: float = 4.0) -> PinnedReport:
    """Clients pinned to one side of a partition. A minority-side client must never get a
    confirm: an ok send, an ok receive that returned messages (a lease), an ok ack or nack is
    a violation (an ok empty receive is counted apart: it confirms nothing). The consumer on
    the majority side must keep going: in an episode whose majority-side operations span
    ``progress_window`` seconds or more, at least one of its receives must succeed."""
    rep = PinnedReport()
    majority: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if not op.process.startswith(PINNED) or op.kind == "fault":
            continue
        episode, _, role = op.process.partition("-")
        if role.startswith("minority"):
            rep.minority_ops += 1
            if op.outcome != "ok":
                rep.minority_refused += 1
            elif op.kind == "receive" and not op.deliveries:
                rep.minority_empty_reads += 1
            else:
                rep.minority_confirms.append(
                    f"op {op.index} ({op.process} {op.kind} via node {op.node}) was confirmed"
                )
        elif role.startswith("majority"):
            majority[episode].append(op)
    rep.episodes = len({o.process.partition("-")[0] for o in ops if o.process.startswith(PINNED)})
    for episode, mine in sorted(majority.items()):
        ok = sum(o.outcome == "ok" for o in mine if o.kind == "receive")
        rep.majority_ok += ok
        span = max(o.end for o in mine) - min(o.start for o in mine)
        if not ok and span >= progress_window:
            rep.majority_stalled.append(
                f"{episode}: no receive of the majority-side consumer succeeded in {span:.1f}s"
            )
    return rep


def delivery_events(ops: Sequence[Op]) -> list[DeliveryEvent]:
    """Every delivery of every ok receive, with its sure lease window (see the module doc)."""
    nack_start: dict[str, float] = {}
    for op in ops:
        if op.kind == "nack":
            for r in op.receipts:
                nack_start[r] = min(nack_start.get(r, op.start + op.delay), op.start + op.delay)
    events = []
    for op in ops:
        if op.kind != "receive" or op.outcome != "ok":
            continue
        for d in op.deliveries:
            until = op.start + op.visibility
            nacked = d.receipt in nack_start
            if nacked:
                until = min(until, nack_start[d.receipt])
            events.append(
                DeliveryEvent(
                    key=d.key,
                    queue=op.queue,
                    seq=d.seq,
                    receipt=d.receipt,
                    receive_count=d.receive_count,
                    receive_op=op.index,
                    start=op.start,
                    end=op.end,
                    visibility=op.visibility,
                    sure_until=until,
                    nacked=nacked,
                )
            )
    return events


def check(
    ops: Sequence[Op],
    *,
    tolerance: float = 0.01,
    delay_tolerance: float = 0.5,
    ttl_slack: float = 1.0,
) -> Report:
    """Check a complete history (every operation finished; the queues drained at the end).
    ``delay_tolerance``: how early a delayed message or a retry may come, ``ttl_slack``: how
    late after its time to live a message may be leased (`tests.chaos.apicheck`). A confirmed
    message sent with a time to live that nothing delivered expired: not lost."""
    rep = Report(ops=len(ops))
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for op in ops:
        by_kind[op.kind][op.outcome] += 1
    rep.ops_by_kind = {k: dict(v) for k, v in sorted(by_kind.items())}

    send_outcomes: dict[str, set[str]] = defaultdict(set)
    for op in ops:
        if op.kind == "send":
            for k in op.keys:
                send_outcomes[k].add(op.outcome)
    rep.attempted = len(send_outcomes)
    confirmed = {k for k, outs in send_outcomes.items() if "ok" in outs}
    rep.acked = len(confirmed)

    events = delivery_events(ops)
    rep.deliveries = len(events)
    by_key: dict[str, list[DeliveryEvent]] = defaultdict(list)
    by_msg: dict[MessageId, list[DeliveryEvent]] = defaultdict(list)
    for e in events:
        by_key[e.key].append(e)
        by_msg[(e.queue, e.seq)].append(e)
    rep.delivered = len(by_key)

    rep.lost = sorted(confirmed - by_key.keys() - ttl_keys(ops))
    # Dead-letter and redrive copies (`check_surfaces` counts them) and rewound copies
    # (`check_rewinds`): new seqs of one key, not stored twice.
    moved = moved_keys(ops) | rewound_keys(ops)
    for k in sorted(by_key):
        outs = send_outcomes.get(k)
        if outs is None:
            rep.unexpected.append(k)
        elif outs == {"failed"}:
            rep.failed_delivered.append(k)
        elif "ok" not in outs:
            rep.recovered.append(k)
        if k not in moved and len({(e.queue, e.seq) for e in by_key[k]}) > 1:
            rep.stored_twice.append(k)

    # Acks: the earliest confirmation per stored message.
    receipt_msg = {e.receipt: (e.queue, e.seq) for e in events}
    acked_at: dict[MessageId, float] = {}
    for op in ops:
        if op.kind != "ack" or op.outcome != "ok":
            continue
        for r, ok in zip(op.receipts, op.entry_ok, strict=False):
            msg = receipt_msg.get(r)
            if ok and msg is not None:
                acked_at[msg] = min(acked_at.get(msg, op.end), op.end)
    rep.consumed = len(acked_at)

    duplicated: set[str] = set(rep.stored_twice)
    acked_receipts = {
        r
        for op in ops
        if op.kind == "ack" and op.outcome == "ok"
        for r, ok in zip(op.receipts, op.entry_ok, strict=False)
        if ok
    }
    for msg, evs in sorted(by_msg.items()):
        name = f"{msg[0]}/{msg[1]} ({evs[0].key})"
        at = acked_at.get(msg)
        if at is not None:
            for e in evs:
                if e.start > at:
                    rep.redelivered_after_ack.append(
                        f"{name} received by op {e.receive_op} "
                        f"{e.start - at:.3f}s after its ack was confirmed"
                    )
                    duplicated.add(e.key)
        by_count = sorted(evs, key=lambda e: e.receive_count)
        for prev, nxt in pairwise(by_count):
            if prev.receive_count == nxt.receive_count:
                rep.lease_forks.append(
                    f"{name}: ops {prev.receive_op} and {nxt.receive_op} both got "
                    f"receive_count {nxt.receive_count}"
                )
            elif prev.receipt in acked_receipts and at is not None and nxt.start <= at:
                rep.redelivered_after_ack.append(
                    f"{name}: leased again (op {nxt.receive_op}, receive_count "
                    f"{nxt.receive_count}) after the ack of receive_count {prev.receive_count}"
                )
                duplicated.add(nxt.key)
        ordered = sorted(evs, key=lambda e: e.end)
        for i, a in enumerate(ordered):
            for b in ordered[i + 1 :]:
                lo = max(a.end, b.end)
                hi = min(a.sure_until, b.sure_until)
                if hi - lo > tolerance:
                    rep.lease_overlaps.append(
                        f"{name}: ops {a.receive_op} and {b.receive_op} "
                        f"both leased it for {hi - lo:.3f}s"
                    )
    rep.rewind = check_rewinds(ops, tolerance=delay_tolerance)
    rep.stored_twice = sorted({*rep.stored_twice, *rep.rewind.stored_twice})
    duplicated.update(rep.rewind.stored_twice)
    rep.duplicated = sorted(duplicated)
    rep.pinned = check_pinned(ops)
    rep.surfaces = check_surfaces(
        ops, tolerance=tolerance, delay_tolerance=delay_tolerance, ttl_slack=ttl_slack
    )
    return rep


# -- replicas --------------------------------------------------------------------------------------
def check_replicas(statuses: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """Differences between nodes' ``/v1/status`` after quiescence: per group the same commit,
    applied == commit, the same last index on every node hosting it (every node for the meta
    group "0"; a data group's replicas as the catalog's ``data_groups`` name them, when the
    status has them); the same queue placement. Empty when identical."""
    problems: list[str] = []
    if not statuses:
        return ["no node answered /v1/status"]
    groups = sorted({g for st in statuses.values() for g in st.get("groups", {})}, key=int)
    catalog: dict[str, Any] = {}
    for st in statuses.values():
        catalog = st.get("data_groups") or catalog
    for g in groups:
        seen = {}
        replicas = catalog.get(g, {}).get("replicas") if g != "0" else None
        for nid, st in sorted(statuses.items()):
            info = st.get("groups", {}).get(g)
            if info is None:
                if replicas is None or nid in replicas:
                    problems.append(f"group {g}: node {nid} does not report it")
                continue
            if info["applied"] != info["commit"]:
                problems.append(
                    f"group {g}: node {nid} applied {info['applied']} != commit {info['commit']}"
                )
            seen[nid] = (info["commit"], info["last_index"])
        if len(set(seen.values())) > 1:
            problems.append(f"group {g}: (commit, last_index) differ by node: {seen}")
    placements = {nid: st.get("placement") for nid, st in statuses.items()}
    if len({repr(sorted((p or {}).items())) for p in placements.values()}) > 1:
        problems.append(f"queue placement differs by node: {placements}")
    return problems


DIGEST_FIELDS = ("image_sha256", "image_bytes", "segments_sha256", "segments")


def compare_digests(digests: Mapping[int, Mapping[int, Mapping[str, Any]]]) -> list[str]:
    """Differences between replicas' ``/v1/groups/{group}/digest`` answers: ``digests`` maps a
    data group to {node: digest}. Every replica must report the same ``applied`` index (else
    the group has not quiesced: "applied differs", worth waiting for) and, at that index, the
    same image and segment hashes (byte-for-byte equal state). Empty when identical."""
    problems: list[str] = []
    for g, by_node in sorted(digests.items()):
        applied = {nid: d["applied"] for nid, d in sorted(by_node.items())}
        if len(set(applied.values())) > 1:
            problems.append(f"group {g}: applied differs by node: {applied}")
            continue
        for name in DIGEST_FIELDS:
            seen = {nid: d[name] for nid, d in sorted(by_node.items())}
            if len(set(seen.values())) > 1:
                short = {n: str(v)[:12] for n, v in seen.items()}
                problems.append(f"group {g}: {name} differs by node at applied {applied}: {short}")
    return problems


def same_stats(stats: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """Differences between the queue stats read through every node (one queue)."""
    variants = {repr(sorted(s.items())) for s in stats.values()}
    return [] if len(variants) <= 1 else [f"stats differ by node: {dict(stats)}"]


def summarize(reports: Iterable[Report]) -> dict[str, int]:
    """Totals over several runs, for the table."""
    total: dict[str, int] = defaultdict(int)
    for r in reports:
        total["runs"] += 1
        total["operations"] += r.ops
        total["attempted"] += r.attempted
        total["acked"] += r.acked
        total["consumed"] += r.consumed
        total["deliveries"] += r.deliveries
        total["fifo_deliveries"] += r.surfaces.fifo_deliveries
        total["delayed_deliveries"] += r.surfaces.delayed_deliveries
        total["scheduled_deliveries"] += r.surfaces.scheduled_deliveries
        total["ttl_deliveries"] += r.surfaces.ttl_deliveries
        total["expired_unseen"] += r.surfaces.expired_unseen
        total["retried"] += r.surfaces.retried
        total["dead_lettered"] += r.surfaces.dead_lettered
        total["redriven"] += r.surfaces.redriven
        total["surface_failures"] += len(r.surfaces.failures()) + len(r.rewind.failures())
        total["rewinds"] += sum(r.rewind.rewinds.values())
        total["rewinds_ok"] += r.rewind.rewinds.get("ok", 0)
        total["rewinds_unknown"] += r.rewind.rewinds.get("unknown", 0)
        total["rewound_reported"] += r.rewind.reported
        total["rewind_judged"] += r.rewind.judged
        total["rewind_allowed"] += r.rewind.allowed
        total["rewind_copies"] += r.rewind.copies
        total["rewind_required"] += r.rewind.required
        for name in (
            "lost",
            "unexpected",
            "failed_delivered",
            "duplicated",
            "stored_twice",
            "recovered",
            "redelivered_after_ack",
            "lease_overlaps",
            "lease_forks",
        ):
            total[name] += len(getattr(r, name))
    return dict(total)
