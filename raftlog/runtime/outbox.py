"""`Outbox`: the node's outgoing Raft traffic, batched per peer.

Messages the groups send during one event-loop iteration are collected per peer and flushed
together by one callback at the end of it, so many groups share frames and syscalls: per peer
one ``RAFT`` frame with every message but snapshots (each snapshot goes in a frame of its own,
so a large one, sent in chunks, does not hold the small messages back), one ``BEATS`` frame with
every heartbeat, one ``BEAT_ACKS`` with every heartbeat answer, and one ``QUIESCE`` with the last
heartbeats of the groups going idle (`raftlog.runtime.liveness`). A heartbeat for a group that
sent that peer an append since the last tick is skipped: the append already proved liveness.

A ``RAFT`` frame the transport refuses (peer unknown, link down, buffer full) is reported to its
groups: the peer is unreachable (the core probes it again) and a snapshot in it failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from raftlog.core import Message, MsgType
from raftlog.runtime.config import SendCounters
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.host import PeerTransport
from raftlog.transport.codec import (
    Beat,
    BeatAck,
    FrameKind,
    encode_beat_acks,
    encode_beats,
    encode_messages,
)


@dataclass(slots=True)
class _Box:
    """What goes to one peer at the next flush."""

    messages: list[tuple[int, Message]] = field(default_factory=list)
    beats: list[Beat] = field(default_factory=list)
    acks: list[BeatAck] = field(default_factory=list)
    quiet: list[Beat] = field(default_factory=list)


class Outbox:
    """Per-peer batching of the groups' messages (see the module docstring)."""

    __slots__ = ("_appended", "_boxes", "_counters", "_groups", "_scheduled", "_transport")

    def __init__(
        self,
        transport: PeerTransport,
        groups: Mapping[int, GroupDriver],
        counters: SendCounters,
    ) -> None:
        """``groups``: the host's open groups (read at each flush, to report refused frames);
        ``counters``: where appends and flushes are counted."""
        self._transport = transport
        self._groups = groups
        self._counters = counters
        self._boxes: dict[int, _Box] = {}
        self._scheduled = False
        # (peer, group) pairs that got an append since the last tick: their heartbeat is skipped.
        self._appended: set[tuple[int, int]] = set()

    def send(self, group: int, msgs: Sequence[Message]) -> None:
        """Queue ``group``'s messages for their peers (the groups' `Sender`)."""
        c = self._counters
        for m in msgs:
            box = self._box(m.to)
            if m.type is MsgType.HEARTBEAT:
                if (m.to, group) in self._appended:
                    continue
                box.beats.append(Beat(group, m.term, m.commit))
            elif m.type is MsgType.HEARTBEAT_RESP:
                box.acks.append(BeatAck(group, m.term))
            else:
                if m.type is MsgType.APP:
                    self._appended.add((m.to, group))
                    c.appends += 1
                    c.append_entries += len(m.entries)
                    c.append_bytes += sum(len(e.data) for e in m.entries)
                box.messages.append((group, m))
        self._schedule()

    def quiesce(self, group: int, term: int, commit: int, followers: Iterable[int]) -> None:
        """Queue the last heartbeat of ``group`` (led here, going idle) for ``followers``. It is
        not sent if the group woke again before the flush."""
        for p in followers:
            self._box(p).quiet.append(Beat(group, term, commit))
        self._schedule()

    def new_tick(self) -> None:
        """A tick began: every group's heartbeat goes out again."""
        self._appended.clear()

    def _box(self, peer: int) -> _Box:
        box = self._boxes.get(peer)
        if box is None:
            box = self._boxes[peer] = _Box()
        return box

    def _schedule(self) -> None:
        if self._boxes and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Send everything queued, at most one frame of each kind per peer (and one frame per
        snapshot)."""
        self._scheduled = False
        boxes, self._boxes = self._boxes, {}
        self._counters.flushes += 1
        send = self._transport.send
        groups = self._groups
        for peer, box in sorted(boxes.items()):
            small = [(g, m) for g, m in box.messages if m.type is not MsgType.SNAP]
            batches = [small] if small else []
            batches += [[(g, m)] for g, m in box.messages if m.type is MsgType.SNAP]
            for batch in batches:
                if send(peer, FrameKind.RAFT, encode_messages(batch)):
                    continue
                for group, m in batch:
                    g = groups.get(group)
                    if g is None:
                        continue
                    if m.type is MsgType.SNAP:
                        g.report_snapshot(peer, False)
                    g.report_unreachable(peer)
            if box.beats:
                send(peer, FrameKind.BEATS, encode_beats(box.beats))
            if box.acks:
                send(peer, FrameKind.BEAT_ACKS, encode_beat_acks(box.acks))
            # A group woken since it quiesced (a proposal in the same turn) says nothing.
            quiet = [b for b in box.quiet if (g := groups.get(b.group)) and g.quiesced]
            if quiet:
                send(peer, FrameKind.QUIESCE, encode_beats(quiet))
