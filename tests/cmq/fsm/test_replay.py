"""Replay equality: same commands ⇒ same image bytes; snapshot at k + suffix == full replay."""

from __future__ import annotations

import random
from pathlib import Path

from cmq.fsm import (
    Ack,
    ChangeVisibility,
    Command,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Expire,
    FileSegmentStore,
    Lease,
    Leased,
    MemorySegmentStore,
    Nack,
    NewMessage,
    Produce,
    Purge,
    QueueMachine,
)
from cmq.model import QueueAttributes

from .harness import Applier

ATTRS = (
    QueueAttributes(visibility_timeout=1, message_retention_seconds=60),
    QueueAttributes(visibility_timeout=2, dead_letter_queue="d", max_receive_count=2),
)


def script(seed: int, n: int = 1500) -> list[Command]:
    """A deterministic random command sequence; lease ids are guessed (stale ones included),
    since the commands must not depend on a particular machine's results."""
    rnd = random.Random(seed)
    now = 1_000_000
    names = ["a", "b", "c"]
    cmds: list[Command] = [CreateQueue(n, ATTRS[i % 2], now) for i, n in enumerate(names)]
    for i in range(n):
        now += rnd.randint(-100, 700)
        q = rnd.choice(names)
        k = rnd.random()
        if k < 0.35:
            msgs = tuple(
                NewMessage(
                    f"{i}-{j}",
                    bytes(rnd.randbytes(rnd.randint(0, 30))),
                    False,
                    (),
                    rnd.choice((None, 0, 800)),
                    rnd.choice((None, None, "dd")),
                )
                for j in range(rnd.randint(1, 4))
            )
            cmds.append(Produce(q, now, msgs))
        elif k < 0.6:
            cmds.append(Lease(q, now, rnd.randint(0, 5), rnd.choice((None, 0, 1500))))
        elif k < 0.75:
            cmds.append(
                Ack(q, now, tuple((rnd.randint(1, 60), rnd.randint(1, 80)) for _ in range(3)))
            )
        elif k < 0.82:
            cmds.append(
                Nack(q, now, ((rnd.randint(1, 60), rnd.randint(1, 80)),), rnd.randint(0, 900))
            )
        elif k < 0.88:
            cmds.append(ChangeVisibility(q, now, ((rnd.randint(1, 60), rnd.randint(1, 80), 3000),)))
        elif k < 0.93:
            cmds.append(DeadLetter(q, tuple(rnd.randint(1, 60) for _ in range(2))))
        elif k < 0.97:
            now += 30_000
            cmds.append(Expire(q, now))
        elif k < 0.985:
            cmds.append(Purge(q, now))
        else:
            cmds.append(DeleteQueue(q))
            cmds.append(CreateQueue(q, ATTRS[names.index(q) % 2], now))
    return cmds


def machine(store: MemorySegmentStore | FileSegmentStore) -> QueueMachine:
    return QueueMachine(store, segment_bytes=400, segment_age_ms=20_000)


def test_same_commands_same_image() -> None:
    cmds = script(1)
    m1, m2 = machine(MemorySegmentStore()), machine(MemorySegmentStore())
    a1, a2 = Applier(m1), Applier(m2)
    leased = 0
    for i, cmd in enumerate(cmds):
        r1, r2 = a1(cmd), a2(cmd)
        assert r1 == r2
        leased += isinstance(r1, Leased) and len(r1.messages)
        if i % 300 == 0:
            assert m1.snapshot() == m2.snapshot()
    assert m1.snapshot() == m2.snapshot()
    assert leased > 100


def test_snapshot_plus_suffix_equals_full_replay(tmp_path: Path) -> None:
    cmds = script(2)
    full = machine(MemorySegmentStore())
    run_full = Applier(full)
    results = [run_full(c) for c in cmds]
    for k in (0, 7, 400, 1100, len(cmds)):
        store = FileSegmentStore(tmp_path / f"k{k}")
        m = machine(store)
        run = Applier(m)
        for c in cmds[:k]:
            run(c)
        image = m.snapshot()
        for c in cmds[k : k + 50]:  # appended after the snapshot, then "lost" in a crash
            run(c)
        store.close()
        store = FileSegmentStore(tmp_path / f"k{k}")
        restored = machine(store)
        restored.restore(k, image)
        run = Applier(restored)
        assert [run(c) for c in cmds[k:]] == results[k:]
        assert restored.snapshot() == full.snapshot()
        store.close()


def test_images_do_not_depend_on_when_earlier_images_were_taken() -> None:
    """Replicas snapshot at different times; encoding must not leave a trace in later images
    (a run-optimized bitmap once serialized differently from a fresh one with the same bits)."""
    from cmq.fsm.commands import Ack, CreateQueue, Lease, Leased, NewMessage, Produce, Purge
    from cmq.model import QueueAttributes
    from tests.cmq.fsm.harness import Applier

    now = 1_000_000
    cmds_a = [
        CreateQueue("a", QueueAttributes(), now),
        Produce("a", now, tuple(NewMessage(f"x{i}", b"", False, (), None, None) for i in (1, 2))),
        Purge("a", now),
    ]
    produce = Produce("a", now, (NewMessage("x3", b"", False, (), None, None),))
    images = []
    for encode_midway in (True, False):
        m = QueueMachine(MemorySegmentStore(), segment_bytes=300)
        apply = Applier(m)
        for c in cmds_a:
            apply(c)
        if encode_midway:
            m.encode_image()
        apply(produce)
        leased = apply(Lease("a", now, 1, None))
        assert isinstance(leased, Leased)
        apply(Ack("a", now, ((leased.messages[0].seq, leased.messages[0].lease_id),)))
        images.append(m.encode_image(reuse=False))
    assert images[0] == images[1]
