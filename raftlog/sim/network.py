"""`SimNetwork`: a seeded, lossy, reordering network between simulated nodes.

Messages travel in a priority queue keyed by ``(deliver_at, seq)``; ``seq`` is a global counter,
so two messages due at the same time leave in the order they were sent and a run is a pure
function of the seed. Faults work at *node-pair* granularity -- all groups between two nodes
share one connection's fate, as they share one TCP connection in the real transport:

- random loss (``drop``), duplication (``duplicate``) and delay (``min_delay``..``max_delay``,
  with an occasional ``slow`` outlier), so messages are also reordered;
- directed cuts: ``a -> b`` blocked while ``b -> a`` stays open (one-way partition);
  `partition` cuts both directions between two sides (symmetric partition);
- `heal` removes every cut; `set_faults` changes loss/duplication/delay at run time.

A message whose link is cut when it is sent *or* when it is due is lost (the connection broke
with it in flight). Nothing here reads a clock: the caller passes ``now`` (simulated time).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from raftlog.core.types import Message


@dataclass(frozen=True, slots=True)
class NetFaults:
    """Loss, duplication and delay of every link. Probabilities in ``[0, 1]``; times > 0.

    ``slow`` is the probability that one message takes up to ``slow_factor`` times
    ``max_delay`` (an outlier that overtakes nothing but is overtaken by many).
    """

    drop: float = 0.0
    duplicate: float = 0.0
    min_delay: int = 1
    max_delay: int = 4
    slow: float = 0.0
    slow_factor: int = 10


PERFECT = NetFaults()
"""No loss, no duplication, short delays: what the network becomes when faults heal."""


class SendOutcome(IntEnum):
    """What became of one `SimNetwork.send`."""

    QUEUED = 0
    """In flight (perhaps twice); `pop` delivers it later unless a cut intervenes."""
    CUT = 1
    """Lost at once: the link is cut. A real transport notices this (connection refused)."""
    LOST = 2
    """Silently lost in transit: nobody is told."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message in flight: due at ``deliver_at``; ``seq`` orders messages due together."""

    deliver_at: int
    seq: int
    group: int
    msg: Message


class SimNetwork:
    """The in-flight messages of a simulation and the faults applied to them.

    All randomness comes from the ``rng`` passed in (the simulation's single generator).
    Invariant: `pop` returns envelopes in non-decreasing ``(deliver_at, seq)`` order.
    """

    __slots__ = ("_cut", "_queue", "_rng", "_seq", "faults", "stats")

    def __init__(self, rng: random.Random, faults: NetFaults = PERFECT) -> None:
        self._rng = rng
        self.faults = faults
        self._queue: list[tuple[int, int, Envelope]] = []
        self._seq = 0
        self._cut: set[tuple[int, int]] = set()
        self.stats: dict[str, int] = {
            "sent": 0,
            "cut": 0,
            "lost": 0,
            "dup": 0,
            "delivered": 0,
            "reset": 0,
        }

    # -- faults -----------------------------------------------------------------------------------
    def set_faults(self, faults: NetFaults) -> None:
        """Use ``faults`` for every message sent from now on."""
        self.faults = faults

    def cut(self, frm: int, to: int) -> None:
        """Block ``frm -> to`` (one direction only)."""
        self._cut.add((frm, to))

    def partition(self, side_a: Iterable[int], side_b: Iterable[int]) -> None:
        """Cut every link between the two sides, in both directions."""
        a = sorted(side_a)
        b = sorted(side_b)
        for x in a:
            for y in b:
                if x != y:
                    self._cut.add((x, y))
                    self._cut.add((y, x))

    def heal(self) -> None:
        """Remove every cut (loss/duplication/delay are left as they are)."""
        self._cut.clear()

    def is_cut(self, frm: int, to: int) -> bool:
        """Whether ``frm -> to`` is currently blocked."""
        return (frm, to) in self._cut

    def cuts(self) -> list[tuple[int, int]]:
        """The blocked directed links, sorted."""
        return sorted(self._cut)

    # -- traffic ----------------------------------------------------------------------------------
    def send(self, now: int, group: int, msg: Message) -> SendOutcome:
        """Put ``msg`` (of ``group``) on the wire at time ``now``."""
        self.stats["sent"] += 1
        if (msg.frm, msg.to) in self._cut:
            self.stats["cut"] += 1
            return SendOutcome.CUT
        f = self.faults
        rng = self._rng
        if f.drop and rng.random() < f.drop:
            self.stats["lost"] += 1
            return SendOutcome.LOST
        self._enqueue(now + self._delay(), group, msg)
        if f.duplicate and rng.random() < f.duplicate:
            self.stats["dup"] += 1
            self._enqueue(now + self._delay(), group, msg)
        return SendOutcome.QUEUED

    def _delay(self) -> int:
        f = self.faults
        rng = self._rng
        if f.slow and rng.random() < f.slow:
            return rng.randint(f.max_delay, f.max_delay * f.slow_factor)
        return rng.randint(f.min_delay, f.max_delay)

    def _enqueue(self, at: int, group: int, msg: Message) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, Envelope(at, self._seq, group, msg)))

    def peek_time(self) -> int | None:
        """When the next message is due (None when nothing is in flight)."""
        return self._queue[0][0] if self._queue else None

    def pop(self) -> tuple[Envelope, bool]:
        """Take the next due message; the flag is False when its link was cut meanwhile.

        Raises ``IndexError`` when nothing is in flight.
        """
        _, _, env = heapq.heappop(self._queue)
        if (env.msg.frm, env.msg.to) in self._cut:
            self.stats["cut"] += 1
            return env, False
        self.stats["delivered"] += 1
        return env, True

    def drop(self, group: int, node: int) -> int:
        """Forget every message of ``group`` in flight to or from ``node``; returns how many.

        What a connection reset does to a replica that restarts with a new disk: nothing sent
        to or by its earlier incarnation arrives after it (a TCP connection delivers in order
        and dies with the process, so the old incarnation's traffic cannot overtake the new
        one's, as this network's delays otherwise let it).
        """
        kept = [
            item
            for item in self._queue
            if item[2].group != group or node not in (item[2].msg.frm, item[2].msg.to)
        ]
        dropped = len(self._queue) - len(kept)
        if dropped:
            heapq.heapify(kept)
            self._queue = kept
            self.stats["reset"] += dropped
        return dropped

    def in_flight(self) -> int:
        """How many messages are queued."""
        return len(self._queue)
