"""The optional `AfterApply` hook: the runtime calls it after each batch of applies and after
each restore, so a state machine records effects in ``apply`` and a host consumes them after."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raftlog.runtime import MultiRaft, RuntimeConfig
from raftlog.runtime.applog import AppendLog
from raftlog.runtime.statemachine import AfterApply
from raftlog.transport.peer import Address
from tests.ports import free_ports


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
    addr = Address("127.0.0.1", free_ports(1)[0])
    node = MultiRaft(
        RuntimeConfig(
            node_id=1,
            listen=addr,
            peers={1: addr},
            secret=b"s",
            data_dirs=(str(tmp_path),),
            tick_interval=0.01,
        )
    )
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
