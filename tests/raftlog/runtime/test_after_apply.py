"""The optional `AfterApply` hook: the runtime calls it after each batch of applies and after
each restore, so a state machine records effects in ``apply`` and a host consumes them after."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raftlog.runtime.applog import AppendLog
from raftlog.runtime.statemachine import AfterApply
from tests.raftlog.runtime.nodes import single_node


class Recording(AppendLog):
    """An `AppendLog` that records, per `after_apply` call, the entries applied since the last."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[bytes] = []
        self.batches: list[list[bytes]] = []
        self.restores = 0

    def apply(self, index: int, command: bytes) -> object:
        self.pending.append(command)
        return super().apply(index, command)

    def restore(self, index: int, data: bytes) -> None:
        self.restores += 1
        super().restore(index, data)

    def after_apply(self) -> None:
        self.batches.append(self.pending)
        self.pending = []


async def test_after_apply_follows_every_batch_of_applies_and_restores(tmp_path: Path) -> None:
    sm = Recording()
    assert isinstance(sm, AfterApply) and not isinstance(AppendLog(), AfterApply)
    node = single_node(tmp_path)
    await node.start()
    try:
        await node.open_group(1, sm, voters=[1])
        assert sm.restores == 1 and sm.batches == [[]]  # the restore on open is followed too
        for _ in range(500):
            if node.leader_of(1) == 1:
                break
            await asyncio.sleep(0.01)
        results = await asyncio.gather(
            *(node.propose(1, f"c{i}".encode(), timeout=5) for i in range(20))
        )
        assert len(results) == 20
        # Every applied command was handed over by a later after_apply, in order.
        assert sm.pending == []
        handed = [c for batch in sm.batches for c in batch]
        assert handed == [f"c{i}".encode() for i in range(20)]
    finally:
        await node.close()
