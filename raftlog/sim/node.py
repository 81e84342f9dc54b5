"""`SimNode`: one node of one group, driven through the `Ready` contract over a `SimDisk`.

The driver carries out each Ready *asynchronously*, the way the runtime does:

1. on ``ready()``: send ``rd.messages`` at once, write the Ready's records (snapshot, entries,
   hard state) to the disk unsynced, and -- when ``rd.must_sync`` -- ask the host to call
   `SimNode.complete` some simulated time later (the fsync); otherwise complete at once;
2. while the Ready is in flight, inputs keep arriving and `SimNode.pump` hands out the leader's
   ready-to-go messages with ``take_messages()`` (its disk write overlaps replication);
3. on completion: sync, update the read-side `MemoryStorage`, send ``rd.persisted_messages``,
   apply ``rd.snapshot`` / ``rd.committed`` to a hash-chain state machine, ``advance(rd)``;
   then maybe take a local snapshot and compact, so lagging followers need ``SNAP`` messages.

Everything observable (messages, entries written, applies, syncs) goes through `NodeHost`, which
the simulation implements: it owns the network, the clock and the checker.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Protocol

from raftlog.core.config import Config
from raftlog.core.rawnode import RawNode
from raftlog.core.storage import MemoryStorage
from raftlog.core.types import Entry, Message, Ready, Snapshot
from raftlog.errors import InvariantViolation
from raftlog.sim.disk import EntriesRecord, HardStateRecord, Record, SimDisk, SnapshotRecord

GENESIS = bytes(16)
"""The digest of the empty state machine (nothing applied)."""


def chain_digest(prev: bytes, e: Entry) -> bytes:
    """The state machine digest after applying ``e`` on top of digest ``prev``."""
    h = hashlib.blake2b(prev, digest_size=16)
    h.update(e.index.to_bytes(8, "big"))
    h.update(e.term.to_bytes(8, "big"))
    h.update(bytes([int(e.kind)]))
    h.update(e.data)
    return h.digest()


class ChainStateMachine:
    """A state machine whose whole state is (applied index, hash chain of applied entries).

    Two replicas with equal digests at an index applied identical sequences up to it. The
    snapshot encoding is ``index (8 bytes) + digest (16 bytes)``; empty snapshot data (the
    bootstrap snapshot a group is founded with) means the genesis digest at that index.
    """

    __slots__ = ("applied", "digest")

    def __init__(self) -> None:
        self.applied = 0
        self.digest = GENESIS

    def apply(self, e: Entry) -> bytes:
        """Apply the next entry; its index must be ``applied + 1``. Returns the new digest."""
        if e.index != self.applied + 1:
            raise InvariantViolation(f"apply gap: entry {e.index} after applied {self.applied}")
        self.digest = chain_digest(self.digest, e)
        self.applied = e.index
        return self.digest

    def encode(self) -> bytes:
        """The snapshot data of the current state."""
        return self.applied.to_bytes(8, "big") + self.digest

    def restore(self, data: bytes, index: int) -> None:
        """Load snapshot ``data`` taken at ``index`` (empty ``data``: genesis at ``index``)."""
        if not data:
            self.applied, self.digest = index, GENESIS
            return
        at = int.from_bytes(data[:8], "big")
        if at != index or len(data) != 24:
            raise InvariantViolation(f"snapshot data for {at} labelled as index {index}")
        self.applied, self.digest = at, data[8:]


class NodeHost(Protocol):
    """What a `SimNode` needs from the simulation around it."""

    def send(self, sn: SimNode, msgs: Sequence[Message]) -> None:
        """Put ``msgs`` from ``sn`` on the network."""
        ...

    def schedule_completion(self, sn: SimNode) -> None:
        """Call ``sn.complete()`` later (the fsync of the Ready in flight finishes)."""
        ...

    def on_ready(self, sn: SimNode, rd: Ready) -> None:
        """A Ready was taken (its entries are about to be written)."""
        ...

    def on_synced(self, sn: SimNode, lost: bool) -> None:
        """``sn``'s disk was synced; ``lost`` when a durable entry was removed or replaced."""
        ...

    def on_restore(self, sn: SimNode, snap: Snapshot) -> None:
        """``sn``'s state machine was replaced by ``snap``."""
        ...

    def on_apply(self, sn: SimNode, e: Entry, digest: bytes) -> None:
        """``sn`` applied ``e``; ``digest`` is its state machine digest afterwards."""
        ...


class SimNode:
    """The driver of one RawNode (node ``id`` in group ``group``). Mutable.

    ``generation`` identifies this incarnation (a restart or wipe creates a new SimNode with a
    higher one), so a completion scheduled for a crashed incarnation is recognised and ignored.
    """

    __slots__ = (
        "disk",
        "generation",
        "group",
        "host",
        "id",
        "inflight",
        "keep_after_compact",
        "raw",
        "sm",
        "snapshot_every",
        "storage",
    )

    def __init__(
        self,
        host: NodeHost,
        config: Config,
        group: int,
        disk: SimDisk,
        *,
        rng: random.Random,
        generation: int,
        snapshot_every: int,
        keep_after_compact: int,
    ) -> None:
        """Start from what ``disk`` durably holds (a crashed disk must be recovered first)."""
        self.host = host
        self.id = config.id
        self.group = group
        self.disk = disk
        self.generation = generation
        self.snapshot_every = snapshot_every
        self.keep_after_compact = keep_after_compact
        if disk.crashed:
            raise InvariantViolation("starting a node on a disk that has not been recovered")
        storage: MemoryStorage = disk.storage()
        self.storage = storage
        self.sm = ChainStateMachine()
        snap = storage.snapshot()
        self.sm.restore(snap.data, snap.meta.index)
        self.raw = RawNode(config, storage, rng)
        self.inflight: Ready | None = None

    def pump(self) -> None:
        """Do whatever the RawNode has for us: start a Ready, or (one is in flight) send the
        messages that may leave before it completes."""
        if self.inflight is not None:
            msgs = self.raw.take_messages()
            if msgs:
                self.host.send(self, msgs)
            return
        for _ in range(64):  # bounded: each round either waits for a disk or makes progress
            if not self.raw.has_ready():
                return
            rd = self.raw.ready()
            self.inflight = rd
            self.host.on_ready(self, rd)
            if rd.messages:
                self.host.send(self, rd.messages)
            records: list[Record] = []
            if rd.snapshot is not None:
                records.append(SnapshotRecord(rd.snapshot, install=True))
            if rd.entries:
                records.append(EntriesRecord(rd.entries))
            if rd.hard_state is not None:
                records.append(HardStateRecord(rd.hard_state))
            if records:
                self.disk.write(records)
            if rd.must_sync:
                self.host.schedule_completion(self)
                return
            self._finish(rd)
        raise InvariantViolation("RawNode kept producing Readies without progress")

    def complete(self) -> None:
        """The fsync of the Ready in flight finished: finish it, then pump again."""
        rd = self.inflight
        if rd is None:
            raise InvariantViolation("completion without a Ready in flight")
        self._finish(rd)
        self.pump()

    def _finish(self, rd: Ready) -> None:
        if rd.must_sync:
            lost = self.disk.sync()
            self.host.on_synced(self, lost)
        st = self.storage
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
        if rd.entries:
            st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        if rd.persisted_messages:
            self.host.send(self, rd.persisted_messages)
        if rd.snapshot is not None:
            self.sm.restore(rd.snapshot.data, rd.snapshot.meta.index)
            self.host.on_restore(self, rd.snapshot)
        for e in rd.committed:
            self.host.on_apply(self, e, self.sm.apply(e))
        self.inflight = None
        self.raw.advance(rd)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        """Every ``snapshot_every`` applied entries: snapshot the state machine, make the
        snapshot durable, and compact the in-memory log (keeping a few entries)."""
        log = self.raw.raft.log
        applied = self.sm.applied
        if log.pending_snapshot is not None or applied != log.applied:
            return
        current = self.storage.snapshot().meta.index
        if applied - current < self.snapshot_every:
            return
        snap = self.storage.create_snapshot(applied, self.raw.raft.conf, self.sm.encode())
        self.disk.write([SnapshotRecord(snap, install=False)])
        self.host.on_synced(self, self.disk.sync())
        self.storage.compact(max(current, applied - self.keep_after_compact))
