"""A tiny synchronous cluster for core unit tests: perfect network unless told otherwise."""

from __future__ import annotations

import random
from collections.abc import Iterable

from raftlog.core import Config, ConfState, EntryKind, MemoryStorage, Message, RawNode, Role


class Cluster:
    """N RawNodes over MemoryStorage; messages are queued and delivered by `deliver`."""

    def __init__(
        self,
        n: int = 3,
        *,
        seed: int = 1,
        pre_vote: bool = True,
        check_quorum: bool = True,
        voters: Iterable[int] | None = None,
        **cfg: int,
    ) -> None:
        self.ids = list(range(1, n + 1))
        conf = ConfState(tuple(voters if voters is not None else self.ids))
        self.storage: dict[int, MemoryStorage] = {}
        self.nodes: dict[int, RawNode] = {}
        self.applied: dict[int, list[tuple[int, int, bytes]]] = {i: [] for i in self.ids}
        self.queue: list[Message] = []
        self.dropped: set[tuple[int, int]] = set()
        self.cfg = cfg
        self.pre_vote = pre_vote
        self.check_quorum = check_quorum
        self.seed = seed
        for i in self.ids:
            self.add_node(i, conf)

    def add_node(self, i: int, conf: ConfState) -> None:
        st = MemoryStorage(conf)
        self.storage[i] = st
        self.applied.setdefault(i, [])
        if i not in self.ids:
            self.ids.append(i)
        self.nodes[i] = RawNode(
            Config(i, pre_vote=self.pre_vote, check_quorum=self.check_quorum, **self.cfg),
            st,
            random.Random(self.seed * 1000 + i),
        )

    def isolate(self, i: int) -> None:
        for j in self.ids:
            if j != i:
                self.dropped.add((i, j))
                self.dropped.add((j, i))

    def heal(self) -> None:
        self.dropped.clear()

    def process(self, i: int) -> bool:
        node = self.nodes[i]
        if not node.has_ready():
            return False
        rd = node.ready()
        self.queue.extend(rd.messages)
        st = self.storage[i]
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
            snap = rd.snapshot
            self.applied[i] = [(0, 0, d) for d in snap.data.split(b"\n") if d]
        st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        self.queue.extend(rd.persisted_messages)
        for e in rd.committed:
            if e.kind is EntryKind.NORMAL and e.data:
                self.applied[i].append((e.term, e.index, e.data))
        node.advance(rd)
        st.set_conf(node.raft.conf)
        return True

    def deliver(self) -> int:
        q, self.queue = self.queue, []
        n = 0
        for m in q:
            if (m.frm, m.to) in self.dropped or m.to not in self.nodes:
                continue
            self.nodes[m.to].step(m)
            n += 1
        return n

    def stabilize(self, rounds: int = 100) -> None:
        for _ in range(rounds):
            # Every node must process its Ready: no short-circuit.
            processed = [self.process(i) for i in list(self.nodes)]
            busy = any(processed)
            if not busy and not self.queue:
                return
            self.deliver()

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            for node in self.nodes.values():
                node.tick()
            self.stabilize()

    def leader(self) -> int:
        leaders = [i for i, nd in self.nodes.items() if nd.raft.role is Role.LEADER]
        return leaders[0] if len(leaders) == 1 else 0

    def propose_many(self, i: int, count: int, prefix: bytes = b"") -> None:
        """Node ``i`` proposes ``count`` commands (``prefix`` then 0, 1, ...); then stabilize."""
        for k in range(count):
            self.nodes[i].propose(b"%s%d" % (prefix, k))
        self.stabilize()

    def elect(self, i: int) -> None:
        self.nodes[i].campaign()
        self.stabilize()
        assert self.nodes[i].raft.role is Role.LEADER, self.nodes[i].status()


def compact(c: Cluster, i: int) -> int:
    """Snapshot node ``i``'s state machine at its applied index and compact its log."""
    node = c.nodes[i]
    applied = node.raft.log.applied
    data = b"\n".join(d for _, _, d in c.applied[i])
    c.storage[i].create_snapshot(applied, node.raft.conf, data)
    c.storage[i].compact(applied)
    return applied
