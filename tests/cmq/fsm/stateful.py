"""What the Hypothesis state machines of the priority and fairness tests share
(`tests.cmq.fsm.test_priorities`, `tests.cmq.fsm.test_fair`): the twin machines against a model
of one queue, and the rules that drive a bare `ReadyIndex`."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from cmq.fsm import Ack, Command, Nack, QueueMachine, Result
from cmq.fsm.ready import ReadyIndex

T0 = 1_700_000_000_000
VIS = 30_000
"""The visibility of every lease the models take (ms)."""


class TwinQueueModel(RuleBasedStateMachine):
    """Queue ``"q"`` on two machines against a model: ``m`` restores from its own snapshot now
    and then (`restore`, which asserts both images equal byte for byte), ``twin`` applies every
    command, and both must answer every command alike (`run`). The model's clock is ``now``;
    it keeps each live seq's ``visible_at`` and the current lease id of each leased one.

    Rules here: `settle` (ack or nack some leased messages whose lease still runs), `advance`
    (the clock), `restore`. A subclass sends and receives (its own rules and checks) and drops
    what else it keeps of an acknowledged seq in `acked`."""

    def __init__(self, m: QueueMachine, twin: QueueMachine) -> None:
        super().__init__()
        self.m = m
        self.twin = twin
        self.now = T0
        self.visible_at: dict[int, int] = {}
        self.leases: dict[int, int] = {}  # seq -> lease id (current)

    def run(self, cmd: Command) -> Result:
        got = self.m.execute(cmd)
        assert self.twin.execute(cmd) == got
        return got

    def acked(self, seq: int) -> None:
        """Drop what the subclass keeps of ``seq``, acknowledged (so gone)."""
        raise NotImplementedError

    @rule(data=st.data(), nack=st.booleans())
    def settle(self, data: st.DataObject, nack: bool) -> None:
        held = sorted(s for s in self.leases if self.visible_at[s] > self.now)
        if not held:
            return
        seqs = data.draw(st.lists(st.sampled_from(held), min_size=1, unique=True))
        entries = tuple((s, self.leases[s]) for s in seqs)
        if nack:
            self.run(Nack("q", self.now, entries, 0))
            for s in seqs:
                self.visible_at[s] = self.now
        else:
            self.run(Ack("q", self.now, entries))
            for s in seqs:
                del self.visible_at[s]
                self.acked(s)
        for s in seqs:
            del self.leases[s]

    @rule(ms=st.sampled_from([1, 1_000, 5_000, VIS]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def restore(self) -> None:
        self.m.restore(7, self.m.snapshot())
        assert self.m.encode_image(reuse=False) == self.twin.encode_image(reuse=False)


class ReadyIndexRules(RuleBasedStateMachine):
    """A bare `ReadyIndex` against a model: ``level`` holds each live seq's level, ``ready`` the
    ready ones, ``next`` the next seq to hand out.

    Rules here: `toggle` a live seq's readiness, `delete` one, `delete_below` a seq, `move` one
    to a new seq (copy-forward). A subclass adds messages and its checks; what else it keeps
    per seq it drops in `forget` and carries over in `moved` (calling these)."""

    def __init__(self) -> None:
        super().__init__()
        self.index = ReadyIndex()
        self.level: dict[int, int] = {}
        self.ready: set[int] = set()
        self.next = 1

    def forget(self, seq: int) -> None:
        """The model's side of deleting ``seq``."""
        del self.level[seq]
        self.ready.discard(seq)

    def moved(self, old: int, new: int) -> None:
        """The model's side of moving ``old`` to ``new``."""
        self.level[new] = self.level.pop(old)
        if old in self.ready:
            self.ready.discard(old)
            self.ready.add(new)

    @rule(data=st.data())
    def toggle(self, data: st.DataObject) -> None:
        if not self.level:
            return
        seq = data.draw(st.sampled_from(sorted(self.level)))
        if seq in self.ready:
            self.index.discard(seq)
            self.ready.discard(seq)
        else:
            self.index.add(seq)
            self.ready.add(seq)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if not self.level:
            return
        seq = data.draw(st.sampled_from(sorted(self.level)))
        self.index.forget(seq)
        self.forget(seq)

    @rule(data=st.data())
    def delete_below(self, data: st.DataObject) -> None:
        end = data.draw(st.integers(0, self.next))
        self.index.forget_below(end)
        for seq in [s for s in self.level if s < end]:
            self.forget(seq)

    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        if not self.level:
            return
        old = data.draw(st.sampled_from(sorted(self.level)))
        new = self.next
        self.next += 1
        self.index.move(old, new)
        self.moved(old, new)
