"""The I/O a `MultiRaft` host is given: its clock, its peer transport and its log disks.

Each seam is a small Protocol with a real implementation and an in-memory twin beside it, so
the same runtime code runs in production (sockets, files and fsync, the system clock) and under
the deterministic simulator (a scheduled memory network, memory disks whose unsynced tail a
power loss drops, a virtual clock):

============================  ===============================  ===================================
seam                          real                             twin
============================  ===============================  ===================================
`Clock`                       `SystemClock`                    `LoopClock` (virtual time + offset)
`PeerTransport`               `raftlog.transport.Transport`    `raftlog.transport.memory`
`LogDisks` / `LogDisk`        `raftlog.storage.Wal`            `raftlog.storage.memory`
============================  ===============================  ===================================

Contracts common to all: every method is called on the event loop's thread; nothing blocks
except where a docstring says it may (those calls go through the host's `Offload`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future as ThreadFuture
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar

from raftlog.core import ConfState
from raftlog.runtime.group_options import DurableLog, Offload
from raftlog.storage.repairs import RepairMarks
from raftlog.storage.walstats import WalStats
from raftlog.transport.address import Address
from raftlog.transport.codec import FrameKind
from raftlog.transport.config import PeerStats

FrameHandler = Callable[[int, FrameKind, bytes], None]
"""(peer id, frame kind, body): a frame that arrived from an authenticated peer."""

PeerDown = Callable[[int], None]
"""(peer id): the connection to that peer was lost."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Clock(Protocol):
    """This node's two clocks: ``monotonic`` (seconds, for timeouts and liveness; never steps)
    and ``wall_ms`` (milliseconds since the epoch, what commands are stamped with; may step,
    which is what the clock guard watches for)."""

    def monotonic(self) -> float: ...

    def wall_ms(self) -> int: ...


class SystemClock:
    """The operating system's clocks."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK = SystemClock()


class LoopClock:
    """Both clocks from an event loop's ``time()`` (virtual under the simulator): the wall clock
    is ``epoch_ms`` plus loop time plus a settable ``offset_ms`` (a clock step or skew the
    simulator injects). The monotonic clock never steps."""

    __slots__ = ("_loop", "epoch_ms", "offset_ms")

    def __init__(self, loop: asyncio.AbstractEventLoop, epoch_ms: int, offset_ms: int = 0) -> None:
        self._loop = loop
        self.epoch_ms = epoch_ms
        self.offset_ms = offset_ms

    def monotonic(self) -> float:
        return self._loop.time()

    def wall_ms(self) -> int:
        return self.epoch_ms + int(self._loop.time() * 1000) + self.offset_ms


async def inline(fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """An `Offload` that calls ``fn`` on the event loop: for twins that never block (memory
    disks), so that a simulated run does no threading and stays deterministic."""
    return fn(*args, **kwargs)


class PeerTransport(Protocol):
    """One node's connections to its peers: authenticated, ordered per peer, frames in and out.

    ``send`` never blocks: it queues a frame, or returns False when the frame cannot go (the
    peer is unknown or the bound on what waits for it is reached; the twin also refuses while
    the link is down, where `Transport` keeps the frame for the next connection). A refused
    frame is dropped: Raft retransmits. True promises nothing more than "queued": frames from
    one peer arrive in the order sent, each at most once, and a lost connection drops what was
    in flight and calls the `PeerDown` handler."""

    @property
    def peers(self) -> Collection[int]:
        """The peers known (this node excluded)."""
        ...

    @property
    def refused(self) -> int:
        """Connections refused before the peer was authenticated."""
        ...

    @property
    def tls(self) -> bool: ...

    def bind(self, on_frame: FrameHandler, on_peer_down: PeerDown) -> None:
        """Where arriving frames and lost connections go; called once, before `start`."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def send(self, peer: int, kind: FrameKind, body: bytes) -> bool: ...

    def is_connected(self, peer: int) -> bool: ...

    def add_peer(self, peer: int, address: Address) -> None: ...

    def remove_peer(self, peer: int) -> None: ...

    def require_protocol(self, protocol: int) -> None:
        """Refuse connections below peer protocol ``protocol`` from now on."""
        ...

    def stats(self) -> Mapping[int, PeerStats]: ...


class LogDisk(Protocol):
    """One data directory's shared log (a WAL): every group bound to it writes through it.

    `open` and `close` may block (recovery reads files; closing drains the writer) and run
    through the host's `Offload`; so does `open_group` (it may read a snapshot file)."""

    @property
    def directory(self) -> str: ...

    def groups(self) -> tuple[int, ...]:
        """Groups with state here (recovered or opened), sorted."""
        ...

    def open_group(self, group: int, initial_conf: ConfState | None) -> DurableLog:
        """``group``'s durable log here; a group new to this disk is bootstrapped with
        ``initial_conf`` when given (a founding member), else starts empty."""
        ...

    def drop_group(self, group: int) -> ThreadFuture[None]:
        """Durably forget ``group`` (its history here is void once the future is done)."""
        ...

    @property
    def repairs(self) -> RepairMarks:
        """The groups whose replica here is being repaired (`raftlog.storage.repairs`)."""
        ...

    def segments(self) -> tuple[int, ...]:
        """The live log segments, oldest first (many: `pinning_groups` should snapshot)."""
        ...

    def pinning_groups(self) -> tuple[int, ...]:
        """Groups whose unsnapshotted entries keep the oldest segment alive."""
        ...

    def stats(self) -> WalStats: ...

    def close(self) -> None: ...


class LogDisks(Protocol):
    """Opens (recovering) the `LogDisk` of a data directory."""

    def __call__(self, directory: str) -> LogDisk: ...


if TYPE_CHECKING:
    from raftlog.storage.memory import MemoryDisks
    from raftlog.storage.waldisk import WalDisks
    from raftlog.transport.memory import MemoryTransport
    from raftlog.transport.peer import Transport

    def _seams(
        loop: asyncio.AbstractEventLoop,
        transports: tuple[Transport, MemoryTransport],
        disks: tuple[WalDisks, MemoryDisks],
    ) -> tuple[PeerTransport, PeerTransport, LogDisks, LogDisks, Clock, Clock, Offload, Offload]:
        """Never called: mypy checks here that each real implementation and its twin satisfy
        their seam (they are structural, so nothing else would say so)."""
        return (
            *transports,
            *disks,
            SYSTEM_CLOCK,
            LoopClock(loop, 0),
            asyncio.to_thread,
            inline,
        )
