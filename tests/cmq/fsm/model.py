"""A plain-Python reference model of the queue state machine (dicts and lists, no indexes).

It states the semantics `QueueMachine` must match, result for result. See the docstring of
`cmq.fsm.machine` for the rules it encodes (queue clock, lease currency, DLQ marking).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cmq import errors
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    Command,
    CommandFailed,
    Created,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Done,
    EntryOutcomes,
    Expire,
    Expired,
    Lease,
    Leased,
    LeasedMessage,
    Nack,
    Produce,
    Produced,
    Purge,
    Purged,
    Result,
    Rewind,
    Rewound,
    SetAttributes,
)
from cmq.fsm.machine import MAX_DEAD_LETTER_PER_LEASE
from cmq.model import DEDUP_WINDOW_MS, QUEUE_NAME, QueueAttributes, QueueStats


@dataclass
class MMsg:
    id: str
    sent_at: int
    visible_at: int
    lease_id: int = 0
    receive_count: int = 0
    pending_dl: bool = False
    start: int | None = None
    """When its retention starts (None: its send): a rewound copy's is the rewind."""
    orig: int | None = None
    """A rewound copy: the seq of the acknowledged message it copies."""

    @property
    def retention_start(self) -> int:
        return self.sent_at if self.start is None else self.start


@dataclass
class MQueue:
    attributes: QueueAttributes
    clock: int
    next_seq: int = 1
    lease_counter: int = 0
    msgs: dict[int, MMsg] = field(default_factory=dict)
    dedup: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    sent: int = 0
    acked: int = 0
    dead: int = 0
    expired: int = 0
    retained: dict[int, tuple[str, int]] = field(default_factory=dict)
    """Acknowledged messages (not rewound copies): seq -> (id, send time)."""

    def tick(self, now: int) -> None:
        self.clock = max(self.clock, now)

    def visible(self) -> list[int]:
        return sorted(
            s for s, m in self.msgs.items() if not m.pending_dl and m.visible_at <= self.clock
        )


class Model:
    def __init__(self) -> None:
        self.queues: dict[str, MQueue] = {}

    def apply(self, cmd: Command) -> Result:
        name = (
            cmd.name
            if isinstance(cmd, CreateQueue | DeleteQueue | SetAttributes | Purge)
            else cmd.queue
        )
        if isinstance(cmd, CreateQueue):
            if not QUEUE_NAME.match(cmd.name):
                return CommandFailed(errors.InvalidQueueName.code, "")
            q0 = self.queues.get(name)
            if q0 is not None:
                if q0.attributes != cmd.attributes:
                    return CommandFailed(errors.QueueAlreadyExists.code, "")
                return Created(False, q0.attributes)
            self.queues[name] = MQueue(cmd.attributes, cmd.now_ms)
            return Created(True, cmd.attributes)
        q = self.queues.get(name)
        if q is None:
            return CommandFailed(errors.QueueNotFound.code, "")
        match cmd:
            case DeleteQueue():
                del self.queues[name]
                return Done()
            case SetAttributes():
                q.attributes = cmd.attributes
                return Done()
            case Purge():
                q.tick(cmd.now_ms)
                n = len(q.msgs)
                q.msgs.clear()
                return Purged(n)
            case Produce():
                q.tick(cmd.now_ms)
                for k in [k for k, v in q.dedup.items() if q.clock - v[2] >= DEDUP_WINDOW_MS]:
                    del q.dedup[k]
                out = []
                for m in cmd.messages:
                    if m.dedup_id is not None and m.dedup_id in q.dedup:
                        hit = q.dedup[m.dedup_id]
                        out.append((hit[0], hit[1]))
                        continue
                    seq = q.next_seq
                    q.next_seq += 1
                    delay = q.attributes.delay_seconds * 1000 if m.delay_ms is None else m.delay_ms
                    # Retention counts from first visibility (the send plus its delay).
                    visible = q.clock + max(0, delay)
                    q.msgs[seq] = MMsg(m.id, q.clock, visible, start=visible)
                    q.sent += 1
                    if m.dedup_id is not None:
                        q.dedup[m.dedup_id] = (m.id, seq, q.clock)
                    out.append((m.id, seq))
                return Produced(tuple(out))
            case Lease():
                q.tick(cmd.now_ms)
                a = q.attributes
                vis = (
                    a.visibility_timeout * 1000 if cmd.visibility_ms is None else cmd.visibility_ms
                )
                deadline = q.clock + max(0, vis)
                limit = a.max_receive_count if a.dead_letter_queue else 0
                leased: list[LeasedMessage] = []
                dead: list[int] = []
                for seq in q.visible():
                    if len(leased) >= cmd.max_messages:
                        break
                    mm = q.msgs[seq]
                    if limit > 0 and mm.receive_count >= limit:
                        if len(dead) >= MAX_DEAD_LETTER_PER_LEASE:
                            break
                        mm.pending_dl = True
                        dead.append(seq)
                        continue
                    q.lease_counter += 1
                    mm.lease_id = q.lease_counter
                    mm.receive_count += 1
                    mm.visible_at = deadline
                    leased.append(LeasedMessage(seq, mm.lease_id, mm.receive_count))
                return Leased(tuple(leased), tuple(dead))
            case Ack():
                q.tick(cmd.now_ms)
                outs: list[str | None] = []
                for seq, lid in cmd.entries:
                    found = q.msgs.get(seq)
                    if found is None or lid == 0 or found.lease_id != lid:
                        outs.append(errors.LEASE_STALE)
                        continue
                    if found.orig is None:
                        q.retained[seq] = (found.id, found.sent_at)
                    del q.msgs[seq]
                    q.acked += 1
                    outs.append(None)
                return EntryOutcomes(tuple(outs))
            case ChangeVisibility():
                q.tick(cmd.now_ms)
                outs = []
                for seq, lid, v in cmd.entries:
                    code = self._inflight(q, seq, lid)
                    if code is None:
                        q.msgs[seq].visible_at = q.clock + max(0, v)
                    outs.append(code)
                return EntryOutcomes(tuple(outs))
            case Nack():
                q.tick(cmd.now_ms)
                outs = []
                for seq, lid in cmd.entries:
                    code = self._inflight(q, seq, lid)
                    if code is None:
                        q.msgs[seq].lease_id = 0
                        q.msgs[seq].visible_at = q.clock + max(0, cmd.delay_ms)
                    outs.append(code)
                return EntryOutcomes(tuple(outs))
            case DeadLetter():
                for named in cmd.seqs:
                    # As the machine resolves it: the seq of an original names its live
                    # rewound copy.
                    copy = next((s for s, m in q.msgs.items() if m.orig == named), named)
                    if q.msgs.pop(named if named in q.msgs else copy, None) is not None:
                        q.dead += 1
                return Done()
            case Expire():
                q.tick(cmd.now_ms)
                cutoff = q.clock - q.attributes.message_retention_seconds * 1000
                gone = [s for s, m in q.msgs.items() if m.retention_start <= cutoff]
                for s in gone:
                    del q.msgs[s]
                q.expired += len(gone)
                return Expired(len(gone))
            case Rewind():
                return self._rewind(q, cmd)
        raise AssertionError(cmd)

    @staticmethod
    def _rewind(q: MQueue, cmd: Rewind) -> Rewound:
        """Acknowledged originals sent at or after ``since_ms`` and within the retention,
        without a live copy, from ``from_seq`` on, at most ``limit``: copied as new messages."""
        q.tick(cmd.now_ms)
        keep = q.attributes.retain_acked_seconds * 1000
        if not keep:
            return Rewound(0, 0)
        floor = max(cmd.since_ms, q.clock - keep + 1)
        copied = {m.orig for m in q.msgs.values() if m.orig is not None}
        todo = sorted(
            s
            for s, (_, sent) in q.retained.items()
            if s >= cmd.from_seq and sent >= floor and s not in copied
        )
        limit = max(1, min(cmd.limit, 1024))
        for orig in todo[:limit]:
            mid, sent = q.retained[orig]
            q.msgs[q.next_seq] = MMsg(mid, sent, q.clock, start=q.clock, orig=orig)
            q.next_seq += 1
        return Rewound(min(limit, len(todo)), todo[limit] if len(todo) > limit else 0)

    @staticmethod
    def _inflight(q: MQueue, seq: int, lid: int) -> str | None:
        m = q.msgs.get(seq)
        if m is None or lid == 0 or m.lease_id != lid:
            return errors.LEASE_STALE
        if m.pending_dl or m.visible_at <= q.clock:
            return errors.MESSAGE_NOT_INFLIGHT
        return None

    def stats(self, name: str, now: int) -> QueueStats:
        q = self.queues[name]
        clock = max(now, q.clock)
        visible = in_flight = delayed = 0
        for m in q.msgs.values():
            if m.pending_dl:
                in_flight += 1
            elif m.visible_at <= clock:
                visible += 1
            elif m.lease_id:
                in_flight += 1
            else:
                delayed += 1
        oldest = min((m.sent_at for m in q.msgs.values()), default=None)
        return QueueStats(
            visible=visible,
            in_flight=in_flight,
            delayed=delayed,
            sent_total=q.sent,
            acked_total=q.acked,
            dead_lettered_total=q.dead,
            expired_total=q.expired,
            oldest_age_ms=0 if oldest is None else clock - oldest,
        )
