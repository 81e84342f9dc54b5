"""`Proposals`: one group's proposals on their way, from the caller's future to the applied
result.

A proposal is first *queued* (bounded by count and bytes: full is `Overloaded`, retriable)
while the group's driver is busy; the driver then *packs* everything queued into as few entries
as the batch size allows (`raftlog.runtime.statemachine.encode_batch`) and proposes them. Each
entry's futures then *wait* by entry index, with the term they were proposed in, until the
entry is applied: a result each when the entry applied is the one proposed (same term), else a
`ProposalDropped` saying the outcome is known (another leader's entry took its place).

Failures keep their meaning: a proposal still queued never reached the log, so its error says
the outcome is known (not applied); one waiting for its entry may still commit elsewhere, so its
error keeps ``outcome_unknown`` as the caller of `fail_all` decided.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence

from raftlog.errors import InvariantViolation, Overloaded, ProposalDropped, RaftError
from raftlog.runtime.group_options import GroupCounters, GroupOptions
from raftlog.runtime.statemachine import encode_batch


class Proposals:
    """The queue and the waiters of one group (see the module docstring). Not thread-safe:
    used on the event loop by the group's driver."""

    __slots__ = ("_counters", "_group", "_options", "_pending", "_pending_bytes", "_waiters")

    def __init__(self, group: int, options: GroupOptions, counters: GroupCounters) -> None:
        self._group = group
        self._options = options
        self._counters = counters
        self._pending: list[tuple[bytes, asyncio.Future[object]]] = []
        self._pending_bytes = 0
        # index -> (term proposed in, futures of the proposals packed in that entry)
        self._waiters: dict[int, tuple[int, list[asyncio.Future[object]]]] = {}

    @property
    def queued(self) -> bool:
        """Proposals wait to be packed into entries."""
        return bool(self._pending)

    @property
    def waiting(self) -> bool:
        """Entries proposed here wait to be applied."""
        return bool(self._waiters)

    def add(self, command: bytes) -> asyncio.Future[object]:
        """Queue ``command`` for the next entry; `Overloaded` when the queue is full."""
        opts = self._options
        if (
            len(self._pending) >= opts.max_pending_proposals
            or self._pending_bytes + len(command) > opts.max_pending_bytes
        ):
            raise Overloaded(f"group {self._group}: {len(self._pending)} proposals queued")
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._pending.append((command, fut))
        self._pending_bytes += len(command)
        self._counters.proposals += 1
        return fut

    def pack(self, propose: Callable[[bytes], int], term: int) -> None:
        """Pack every queued proposal into entries of at most ``max_batch_bytes`` (a single
        larger command goes alone) and ``propose`` each (it returns the entry's index; ``term``
        is the term they are proposed in). A refused entry fails its proposals with the error."""
        while self._pending:
            size = 0
            take = 0
            for cmd, _ in self._pending:
                if take and size + len(cmd) > self._options.max_batch_bytes:
                    break
                size += len(cmd)
                take += 1
            batch = self._pending[:take]
            del self._pending[:take]
            self._pending_bytes -= size
            futures = [f for _, f in batch]
            try:
                index = propose(encode_batch([c for c, _ in batch]))
            except RaftError as exc:
                for f in futures:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self._counters.batches += 1
            self._waiters[index] = (term, futures)

    def await_entry(self, index: int, term: int) -> asyncio.Future[object]:
        """A future for the entry at ``index`` proposed in ``term`` (a membership change)."""
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._waiters[index] = (term, [fut])
        return fut

    def applied(self, index: int, term: int, results: Sequence[object]) -> None:
        """The entry at ``index`` of ``term`` was applied, with the state machine's ``results``
        (one per proposal packed in it): hand them to their proposers."""
        waiter = self._waiters.pop(index, None)
        if waiter is None:
            return
        proposed_in, futures = waiter
        if proposed_in != term:
            exc = ProposalDropped(
                f"entry {index} was replaced by another leader's", outcome_unknown=False
            )
            for f in futures:
                if not f.done():
                    f.set_exception(exc)
            return
        if len(results) != len(futures):
            raise InvariantViolation(f"entry {index}: {len(results)} results for {len(futures)}")
        for f, res in zip(futures, results, strict=True):
            if not f.done():
                f.set_result(res)

    def fail_index(self, index: int, exc: BaseException) -> None:
        """Fail the proposals waiting for the entry at ``index``."""
        waiter = self._waiters.pop(index, None)
        if waiter is not None:
            for f in waiter[1]:
                if not f.done():
                    f.set_exception(exc)

    def fail_through(self, index: int, exc: BaseException) -> None:
        """Fail the proposals waiting for entries at or below ``index`` (a snapshot replaced
        them)."""
        for i in [i for i in self._waiters if i <= index]:
            self.fail_index(i, exc)

    def fail_before(self, term: int, exc: BaseException) -> None:
        """Fail the proposals waiting for entries proposed before ``term``."""
        for i in [i for i, (t, _) in self._waiters.items() if t < term]:
            self.fail_index(i, exc)

    def fail_all(self, exc: RaftError) -> None:
        """Fail every waiter with ``exc``; proposals still queued here (never appended to the
        log) get a copy that says their outcome is known: not applied."""
        for index in list(self._waiters):
            self.fail_index(index, exc)
        pending, self._pending = self._pending, []
        self._pending_bytes = 0
        if pending:
            never = copy.copy(exc)
            never.outcome_unknown = False
            for _, f in pending:
                if not f.done():
                    f.set_exception(never)
