"""`SnapshotShipping`: how one group's outgoing messages reach the host, snapshots made
self-contained on the way.

Most messages go straight to the host's sender. A snapshot (``MsgType.SNAP``) of a state machine
with the `ExportSnapshot` hook is first exported off the event loop (through the host's
offload: it may read the files a light image names) and sent once that is done, as a message of
its own; one export task per snapshot, owned here and cancelled by `stop`. A failed export, or
an image over ``GroupOptions.max_snapshot_transfer``, is logged and reported to the core as a
failed snapshot (the leader probes the follower and tries again later), never dropped silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from raftlog.core import Message, MsgType, Snapshot
from raftlog.errors import RaftError
from raftlog.runtime.group_options import GroupOptions, Offload, Sender
from raftlog.runtime.statemachine import ExportSnapshot, StateMachine

log = logging.getLogger("raftlog.runtime")


class SnapshotShipping:
    """One group's sender (see the module docstring)."""

    __slots__ = ("_export", "_group", "_live", "_offload", "_options", "_report", "_send", "_tasks")

    def __init__(
        self,
        group: int,
        sm: StateMachine,
        send: Sender,
        *,
        offload: Offload,
        options: GroupOptions,
        report: Callable[[int, bool], None],
        live: Callable[[], bool],
    ) -> None:
        """``report(peer, ok)`` tells the core how a snapshot transfer ended; ``live()`` says
        whether the group still runs (an export finishing after it stopped is not sent)."""
        self._group = group
        self._export = sm.export_snapshot if isinstance(sm, ExportSnapshot) else None
        self._send = send
        self._offload = offload
        self._options = options
        self._report = report
        self._live = live
        self._tasks: dict[asyncio.Task[None], None] = {}  # ordered, so runs replay exactly

    def send(self, msgs: Sequence[Message]) -> None:
        """Send ``msgs``; snapshots go once exported (when the state machine has the hook)."""
        export = self._export
        if export is None or not any(m.type is MsgType.SNAP for m in msgs):
            self._send(self._group, msgs)
            return
        plain = [m for m in msgs if m.type is not MsgType.SNAP]
        if plain:
            self._send(self._group, plain)
        for m in msgs:
            if m.type is MsgType.SNAP:
                task = asyncio.get_running_loop().create_task(self._ship(m, export))
                self._tasks[task] = None
                task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def stop(self) -> None:
        """Cancel every export still running and wait for them."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _ship(self, m: Message, export: Callable[[bytes], bytes]) -> None:
        snap = m.snapshot
        if snap is None:
            return
        try:
            data = await self._offload(export, snap.data)
        except (RaftError, OSError, ValueError) as exc:
            log.error(
                "group %d: cannot export snapshot %d for node %d: %s",
                self._group,
                snap.meta.index,
                m.to,
                exc,
                extra={"event": "snapshot_export_failed", "group": self._group},
            )
            self._report(m.to, False)
            return
        limit = self._options.max_snapshot_transfer
        if len(data) > limit:
            log.error(
                "group %d: snapshot %d is %d bytes, over the %d-byte transfer limit; node %d "
                "cannot catch up by snapshot",
                self._group,
                snap.meta.index,
                len(data),
                limit,
                m.to,
                extra={"event": "snapshot_too_large", "group": self._group},
            )
            self._report(m.to, False)
            return
        if self._live():
            self._send(self._group, [replace(m, snapshot=Snapshot(snap.meta, data))])
