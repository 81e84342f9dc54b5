"""Fair queues: the wait (send to receive) of light tenants beside a tenant sending 100x their
rate, and the apply cost of tenants.

In process over `QueueMachine.execute` (the machine's apply path, an in-memory segment store,
16-byte bodies), on a simulated clock in ms, so the figures are the queue's decisions, not this
machine's load. Every ms the producers send what their rates (Poisson arrivals, fixed seed) give;
every ``--poll-ms`` a consumer leases ``--receive`` messages and acks them at once (a capacity
of receive / poll per ms). Light tenants: ``--tenants`` of them at ``--rate`` messages/s each;
the heavy tenant at 100x that rate, above the consumer's capacity, so its backlog grows all run.
Scenarios:

- ``unloaded``: the light tenants alone (group ids set);
- ``fair``: light tenants and the heavy one, every message with its tenant's group id;
- ``no-group``: the same traffic without group ids (seq order: what the queue did before).

Reported: the light tenants' wait p50 / p99 / max in ms (simulated time), and the ratio of the
``fair`` p99 to the ``unloaded`` p99 (the goal: at most 2). Then the apply cost: CPU seconds
(medians of ``--rounds``) to send ``--messages`` messages and lease and ack them all, without
group ids and with 100 tenants.

    PYTHONPATH=. .venv/bin/python bench/fair_queues.py [--seconds 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from cmq.fsm import Ack, CreateQueue, Lease, MemorySegmentStore, NewMessage, Produce, QueueMachine
from cmq.fsm.commands import Leased, Produced
from cmq.model import QueueAttributes

NOW = 1_700_000_000_000
QUEUE = "bench"
HEAVY = "heavy"
BODY = b"x" * 16


def _poisson_step(rng: random.Random, rate_per_ms: float) -> int:
    """How many arrivals one ms brings at ``rate_per_ms`` (Poisson, by inversion)."""
    limit, k, p = pow(2.718281828459045, -rate_per_ms), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def waits(
    seconds: int,
    *,
    tenants: int,
    rate: float,
    heavy: bool,
    groups: bool,
    receive: int,
    poll_ms: int,
) -> list[int]:
    """The light tenants' waits (ms) over a run of ``seconds`` (simulated)."""
    m = QueueMachine(MemorySegmentStore(indexes=True))
    m.execute(CreateQueue(QUEUE, QueueAttributes(visibility_timeout=60), NOW))
    rng = random.Random(11)
    light = [f"t{i:02d}" for i in range(tenants)]
    sent_at: dict[int, tuple[int, bool]] = {}  # seq -> (sent at, light?)
    out: list[int] = []
    n = 0
    for ms in range(seconds * 1000):
        now = NOW + ms
        batch: list[tuple[NewMessage, bool]] = []
        for tenant in light:
            for _ in range(_poisson_step(rng, rate / 1000)):
                n += 1
                group = tenant if groups else None
                batch.append((NewMessage(f"m{n}", BODY, False, (), None, None, group), True))
        if heavy:
            for _ in range(_poisson_step(rng, 100 * rate / 1000)):
                n += 1
                group = HEAVY if groups else None
                batch.append((NewMessage(f"m{n}", BODY, False, (), None, None, group), False))
        if batch:
            res = m.execute(Produce(QUEUE, now, tuple(msg for msg, _ in batch)))
            assert isinstance(res, Produced)
            for (_, seq), (_, is_light) in zip(res.messages, batch, strict=True):
                sent_at[seq] = (now, is_light)
        if ms % poll_ms == 0:
            got = m.execute(Lease(QUEUE, now, receive, 60_000))
            assert isinstance(got, Leased)
            for lm in got.messages:
                at, is_light = sent_at.pop(lm.seq)
                if is_light:
                    out.append(now - at)
            if got.messages:
                m.execute(Ack(QUEUE, now, tuple((lm.seq, lm.lease_id) for lm in got.messages)))
    return out


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def cost(messages: int, tenants: int) -> dict[str, float]:
    """CPU seconds to send ``messages`` (batches of 100) and lease and ack them (10 each);
    ``tenants`` 0: no group ids."""
    m = QueueMachine(MemorySegmentStore(indexes=True))
    m.execute(CreateQueue(QUEUE, QueueAttributes(), NOW))
    rng = random.Random(5)
    batches = [
        tuple(
            NewMessage(
                f"m{s + i}",
                BODY,
                False,
                (),
                None,
                None,
                f"t{rng.randrange(tenants)}" if tenants else None,
            )
            for i in range(100)
        )
        for s in range(0, messages, 100)
    ]
    gc.collect()
    t0 = time.process_time()
    for b in batches:
        m.execute(Produce(QUEUE, NOW, b))
    t1 = time.process_time()
    leases = []
    lease_time = ack_time = 0.0
    while True:
        a = time.process_time()
        got = m.execute(Lease(QUEUE, NOW + 1, 10, 60_000))
        b_ = time.process_time()
        lease_time += b_ - a
        assert isinstance(got, Leased)
        if not got.messages:
            break
        leases.append(got)
        a = time.process_time()
        m.execute(Ack(QUEUE, NOW + 1, tuple((lm.seq, lm.lease_id) for lm in got.messages)))
        ack_time += time.process_time() - a
    return {"sends": t1 - t0, "leases": lease_time, "acks": ack_time}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--tenants", type=int, default=9)
    ap.add_argument("--rate", type=float, default=10.0, help="messages/s per light tenant")
    ap.add_argument("--receive", type=int, default=10)
    ap.add_argument("--poll-ms", type=int, default=10)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    capacity = args.receive * 1000 / args.poll_ms
    offered = args.tenants * args.rate + 100 * args.rate
    print(
        f"{args.tenants} light tenants at {args.rate:g}/s, heavy at {100 * args.rate:g}/s; "
        f"consumer capacity {capacity:g}/s (offered with the heavy tenant {offered:g}/s), "
        f"{args.seconds} s simulated"
    )
    p99 = {}
    for name, heavy, groups in (
        ("unloaded", False, True),
        ("fair", True, True),
        ("no-group", True, False),
    ):
        w = waits(
            args.seconds,
            tenants=args.tenants,
            rate=args.rate,
            heavy=heavy,
            groups=groups,
            receive=args.receive,
            poll_ms=args.poll_ms,
        )
        p99[name] = _pct(w, 0.99)
        print(
            f"  {name:9s} light messages {len(w):6d}  wait p50 {_pct(w, 0.5):8.1f} ms  "
            f"p99 {p99[name]:8.1f} ms  max {max(w) if w else 0:8d} ms"
        )
    print(f"  fair p99 / unloaded p99 = {p99['fair'] / max(p99['unloaded'], 1.0):.2f}")
    for tenants in (0, 100):
        rounds = [cost(args.messages, tenants) for _ in range(args.rounds)]
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        label = "no group ids" if not tenants else f"{tenants} tenants"
        print(
            f"  cost, {label:12s}: sends {med['sends']:.3f} s, leases {med['leases']:.3f} s, "
            f"acks {med['acks']:.3f} s ({args.messages} messages, CPU, median of {args.rounds})"
        )


if __name__ == "__main__":
    main()
