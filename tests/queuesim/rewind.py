"""The queue simulation with rewinds (`cmq.fsm.rewind`): every queue keeps acknowledged
messages (``retain_acked_seconds``) and a rewinder next to the producer proposes a `Rewind` to
a time 0-4 s back every 1.5 virtual seconds, in parts of at most 8 messages. On top of
`tests.queuesim.sim`'s checks (replicas identical, nothing archived twice, ...):

- **nothing else**: an acknowledged message is delivered again only as a new record (never the
  acknowledged one itself) and only after a rewind proposed after its ack with a ``since`` at
  most its send time;
- **once**: each message's fresh deliveries after its ack (receive count 1: a rewound copy
  starts at 0) are at most the rewinds that could have brought it back;
- **each one**: after a rewind that completed (every part answered), every message whose ack
  was seen before it and that was sent at or after its ``since`` is delivered again, unless
  a copy from an earlier rewind was still live then (it is delivered or acknowledged later).

Times are bounds: a send's time lies between its proposal's ``now_ms`` and its answer; an
ack's proposal time bounds when it applied from below. Unknown outcomes only loosen a check.
``python -m tests.queuesim --rewind --seeds N`` runs seeds.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cmq.fsm.commands import Ack, Command, EntryOutcomes, Produce, Produced, Rewind, Rewound
from cmq.model import QueueAttributes
from raftlog.sim.runtime_sim import RuntimeSimConfig
from tests.queuesim.sim import Delivered, DeliveredMessage, QueueSim

RETAIN_SECONDS = 3600
REWIND_PERIOD = 1.5
"""Virtual seconds between two rewinds of a group."""
REWIND_PART = 8
"""Messages per `Rewind` command, so long rewinds go in parts."""


@dataclass(slots=True)
class _Rewind:
    since: int
    proposed: int
    """When its first part was proposed."""
    last: int
    """When its latest part was proposed (a part may copy a message acked after the first)."""
    completed: bool = False
    expect: set[str] = field(default_factory=set)
    """Messages acknowledged (answer seen) before it and sent at or after ``since``."""


class RewindQueueSim(QueueSim):
    """`QueueSim` over queues that keep acknowledged messages, with rewinds."""

    def __init__(self, seed: int, cfg: RuntimeSimConfig) -> None:
        super().__init__(seed, cfg)
        self.sent_window: dict[str, tuple[int, int | None]] = {}
        """id -> (lower, upper bound) of its send time (upper None: the answer was lost)."""
        self.seq_ids: dict[tuple[int, int], str] = {}
        self.ack_proposed: set[str] = set()
        self.acked_at: dict[str, int] = {}
        """id -> proposal time of the first ack of it answered as done."""
        self.acked_seqs: dict[tuple[int, int], int] = {}
        """(group, seq) -> proposal time of the ack answered as done."""
        self.rewinds: dict[int, list[_Rewind]] = {}
        self.returns: dict[str, list[tuple[int, int, int]]] = {}
        """id -> (lease time, group, seq) of each delivery after its ack."""
        self.fresh: dict[str, int] = {}

    def attributes(self) -> QueueAttributes:
        return QueueAttributes(archive=True, retain_acked_seconds=RETAIN_SECONDS)

    async def run(self, group: int, cmd: Command) -> object | None:
        if isinstance(cmd, Produce):
            for m in cmd.messages:
                self.sent_window.setdefault(m.id, (cmd.now_ms, None))
        elif isinstance(cmd, Ack):
            self.ack_proposed.update(
                mid for seq, _ in cmd.entries if (mid := self.seq_ids.get((group, seq)))
            )
        res = await super().run(group, cmd)
        if isinstance(cmd, Produce) and isinstance(res, Produced):
            seen = self.now_ms()
            for m in cmd.messages:
                self.sent_window[m.id] = (cmd.now_ms, seen)
        elif isinstance(cmd, Ack) and isinstance(res, EntryOutcomes):
            for (seq, _), code in zip(cmd.entries, res.outcomes, strict=True):
                mid = self.seq_ids.get((group, seq))
                if code is None and mid is not None:
                    self.acked_at.setdefault(mid, cmd.now_ms)
                    self.acked_seqs.setdefault((group, seq), cmd.now_ms)
        elif isinstance(res, Delivered):
            for lm in res.messages:
                self.seq_ids[(group, lm.seq)] = lm.id
        return res

    def covering(self, group: int, mid: str) -> list[_Rewind]:
        """The rewinds of ``group`` that may bring ``mid`` back: a part proposed after its
        first ack, with a ``since`` at most its send."""
        acked = self.acked_at.get(mid)
        if acked is None:
            return []
        hi = self.sent_window.get(mid, (0, None))[1]
        return [
            r
            for r in self.rewinds.get(group, [])
            if r.last >= acked and (hi is None or r.since <= hi)
        ]

    def redelivery_allowed(self, group: int, lm: DeliveredMessage, now: int) -> bool:
        if (group, lm.seq) in self.acked_seqs:
            return False  # the acknowledged record itself came back
        covering = self.covering(group, lm.id)
        if not covering:
            return False
        self.returns.setdefault(lm.id, []).append((now, group, lm.seq))
        if lm.receive_count == 1:
            n = self.fresh[lm.id] = self.fresh.get(lm.id, 0) + 1
            if n > len(covering):
                self.violation(f"{lm.id} came back {n} times after {len(covering)} rewinds")
        return True

    async def lifecycle(self, group: int, stop: asyncio.Event) -> None:
        rewinder = asyncio.ensure_future(self.rewinder(group, stop))
        try:
            await super().lifecycle(group, stop)
        finally:
            await rewinder

    async def rewinder(self, group: int, stop: asyncio.Event) -> None:
        rounds = 0
        while not stop.is_set():
            await asyncio.sleep(REWIND_PERIOD)
            rounds += 1
            await self.rewind(group, self.now_ms() - rounds * 700 % 4_000)

    async def rewind(self, group: int, since: int) -> None:
        """Propose a rewind of ``group``'s queue to ``since``, part after part; it counts as
        completed only if every part was answered."""
        prefix = f"g{group}-"
        rec = _Rewind(since, self.now_ms(), self.now_ms())
        # A copy may be leased while the original's lease (its ack's answer lost) still runs.
        for mid in self.ack_proposed:
            self.leases.pop(mid, None)
        acked = {m for m in self.acked_ids if m.startswith(prefix)}
        self.rewinds.setdefault(group, []).append(rec)
        start = 0
        while True:
            rec.last = self.now_ms()
            cmd = Rewind(self.queue_name(group), rec.last, since, start, REWIND_PART)
            res = await self.run(group, cmd)
            if not isinstance(res, Rewound):
                return
            if not res.next_seq:
                break
            start = res.next_seq
        rec.completed = True
        rec.expect = {m for m in acked if self.sent_window[m][0] >= since}

    async def final_checks(self) -> None:
        await super().final_checks()
        for recs in self.rewinds.values():
            for r in recs:
                if not r.completed:
                    continue
                for mid in sorted(r.expect):
                    if not self.returned_after(mid, r.proposed):
                        self.violation(
                            f"{mid} (sent at or after {r.since}) was not delivered again after "
                            f"the rewind proposed at {r.proposed}"
                        )

    def returned_after(self, mid: str, at: int) -> bool:
        """Whether ``mid`` was delivered again after ``at``, or a copy of it delivered before
        was still live then (not acknowledged before ``at``)."""
        for t, group, seq in self.returns.get(mid, []):
            if t >= at:
                return True
            acked = self.acked_seqs.get((group, seq))
            if acked is None or acked >= at:
                return True
        return False
