"""`QueueNode`: one cmq node. It hosts the meta group (the catalog) and the data groups on a
`MultiRaft`, and implements `QueueService` for the HTTP layers.

Any node serves any queue. A request is routed to the leader of the queue's data group: run
here if this node leads it, else forwarded over the peer connection (`MultiRaft.call`). Leader
changes are retried until the request deadline, then `Unavailable`. Operations take a JSON-able
*wire form* of their arguments, so a local call and a forwarded one take the same path; sends
and receives, which carry bodies, cross the hop in binary (`cmq.forward`).

Commands carry the clock (ms) of the node that built them, and sends their message ids (unique
per node); the state machines never read a clock. A background loop on each node proposes
expiry (retention) and dead-letter moves for the queues whose group it leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from cmq.errors import (
    CmqError,
    InvalidParameter,
    InvariantBroken,
    MessageTooLarge,
    OutcomeUnknown,
    Overloaded,
    QueueAlreadyExists,
    QueueNotFound,
    ReceiptInvalid,
    Unavailable,
)
from cmq.forward import (
    PRODUCE_CALL,
    decode_produce_call,
    decode_received,
    encode_produce_call,
    encode_received,
)
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    Command,
    CommandFailed,
    Created,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    EntryOutcomes,
    Expire,
    Lease,
    Leased,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    Purged,
    SetAttributes,
    encode_command,
)
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import FileSegmentStore
from cmq.meta import Assignment, CatalogMachine
from cmq.model import (
    MAX_WAIT_SECONDS,
    EntryResult,
    OutgoingMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SentMessage,
    check_queue_name,
)
from cmq.receipts import ReceiptSigner
from raftlog.errors import NotLeader, PeerUnavailable, ProposalDropped, RaftError
from raftlog.errors import Overloaded as RaftOverloaded
from raftlog.runtime import GroupOptions, MultiRaft, RuntimeConfig
from raftlog.runtime.multiraft import RemoteCallError
from raftlog.transport.peer import Address

log = logging.getLogger("cmq.node")

META_GROUP = 0
Wire = dict[str, Any]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """One node's settings (from flags, environment or a TOML file; see `cmq.cli`)."""

    node_id: int
    peer: Address
    peers: dict[int, Address]
    """Every node of the cluster by id (this one included)."""
    data_dirs: tuple[str, ...]
    secret: bytes
    groups: int = 4
    """Data groups (the meta group is extra)."""
    request_timeout: float = 10.0
    max_inflight_sends: int = 24
    """Sends this node carries at once (from receiving the request to its confirm); more wait
    their turn, up to the request deadline, then fail with `Overloaded`. Receives, acks and
    other calls never wait for these slots, so consumers are not queued behind a burst of
    producers: on a saturated node every queued send delays every Raft turn, and with it the
    commits consumers wait for."""
    tick_interval: float = 0.05
    housekeeping_interval: float = 1.0
    group_options: GroupOptions = field(default_factory=GroupOptions)
    rejoin: bool = False
    """Start after losing this node's data (see `RuntimeConfig.rejoin`)."""


class QueueNode:
    """A cmq node; implements `cmq.service.QueueService`."""

    def __init__(self, cfg: NodeConfig) -> None:
        if len(cfg.secret) < 16:
            raise ValueError("the cluster secret must be at least 16 bytes")
        self.cfg = cfg
        self.id = cfg.node_id
        self.raft = MultiRaft(
            RuntimeConfig(
                node_id=cfg.node_id,
                listen=cfg.peer,
                peers=cfg.peers,
                secret=cfg.secret,
                data_dirs=cfg.data_dirs,
                tick_interval=cfg.tick_interval,
                group_options=cfg.group_options,
                rejoin=cfg.rejoin,
            )
        )
        self.data_groups = tuple(range(1, cfg.groups + 1))
        self.catalog = CatalogMachine(self.data_groups)
        self.machines: dict[int, QueueMachine] = {}
        self.signer = ReceiptSigner(cfg.secret)
        self._wakeups: dict[str, asyncio.Event] = {}
        self._id_prefix = secrets.token_hex(5)
        self._id_counter = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._send_slots = asyncio.Semaphore(cfg.max_inflight_sends)
        self._ops: dict[str, _Op] = {
            "meta": _Op(self._op_meta),
            "create": _Op(self._op_create),
            "delete": _Op(self._op_delete),
            "get": _Op(self._op_get),
            "set_attributes": _Op(self._op_set_attributes),
            "purge": _Op(self._op_purge),
            "send": _Op(self._op_send, _encode_sent, _decode_sent, _deduplicated),
            "receive": _Op(self._op_receive, encode_received, decode_received),
            "ack": _Op(self._op_ack),
            "visibility": _Op(self._op_visibility),
            "nack": _Op(self._op_nack),
        }

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Recover and open every group, then serve forwarded calls and housekeeping."""
        await self.raft.start()
        try:
            voters = sorted(self.cfg.peers)
            await self.raft.open_group(META_GROUP, self.catalog, voters=voters)
            for g in self.data_groups:
                data_dir = self.cfg.data_dirs[self.raft.dir_for(g)]
                seg_dir = os.path.join(data_dir, "segments", f"g{g}")
                machine = QueueMachine(FileSegmentStore(seg_dir, durable_root=data_dir))
                machine.on_change = self._on_change
                self.machines[g] = machine
                await self.raft.open_group(g, machine, voters=voters)
        except BaseException:
            # E.g. damaged files: stop what started (bounded: the error must reach the
            # operator even if a shutdown step hangs), then report.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await self.close()
            raise
        self.raft.set_call_handler(self._handle_call)
        self._spawn(self._housekeeping())

    async def close(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.raft.close()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def is_ready(self) -> bool:
        return all(self.raft.leader_of(g) != 0 for g in (META_GROUP, *self.data_groups))

    # -- routing -----------------------------------------------------------------------------------
    async def _run(self, group: int, op: str, args: Wire) -> Any:
        """Run ``op`` at ``group``'s leader (here or forwarded), retrying leader changes until
        the request deadline. Each attempt builds its request anew (a retried send gets fresh
        message ids). An attempt whose outcome is unknown (a leader change after the change
        reached the log, a forwarded call without an answer) is retried only when ``op`` says
        a repeat is harmless; otherwise `OutcomeUnknown` is raised at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.request_timeout
        delay = 0.02
        spec = self._ops[op]
        unknown: OutcomeUnknown | None = None  # an attempt that may have taken effect
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                if unknown is not None:
                    raise unknown
                raise Unavailable(f"no leader for group {group} answered in time")
            leader = self.raft.leader_of(group)
            try:
                if leader == self.id:
                    return await spec.run(args | {"_group": group})
                if leader:
                    if op == "send":
                        payload = encode_produce_call(group, self._produce_command(args))
                    else:
                        payload = orjson.dumps({"op": op, "group": group, "args": args})
                    reply = await self.raft.call(leader, payload, timeout=remaining)
                    return spec.decode(reply)
            except RemoteCallError as e:
                err = _decode_error(e.payload)
                if isinstance(err, OutcomeUnknown):
                    unknown = err
                elif err is not None:
                    raise err from None
            except (NotLeader, ProposalDropped, PeerUnavailable, RaftOverloaded) as e:
                if e.outcome_unknown:
                    unknown = OutcomeUnknown(f"{e}; the outcome is unknown")
            if unknown is not None and not spec.retry_unknown(args):
                raise unknown
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, 0.2)

    async def _handle_call(self, peer: int, payload: bytes) -> bytes:
        """Serve a request forwarded by a peer (we should lead its group)."""
        try:
            if payload[:1] == bytes([PRODUCE_CALL]):
                group, command = decode_produce_call(payload)
                op, args = "send", {"command": command}
            else:
                req = orjson.loads(payload)
                op, group, args = req["op"], int(req["group"]), req["args"]
                if op not in self._ops or op == "send" or not isinstance(args, dict):
                    raise InvalidParameter(f"unknown forwarded operation {op!r}")
            leader = self.raft.leader_of(group)
            if leader != self.id:
                raise NotLeader(leader)
            spec = self._ops[op]
            return spec.encode(await spec.run(args | {"_group": group}))
        except CmqError as e:
            raise RemoteCallError(_error_payload(e.code, e.message)) from None
        except (NotLeader, ProposalDropped, RaftOverloaded) as e:
            code = OutcomeUnknown.code if e.outcome_unknown else "Retry"
            raise RemoteCallError(_error_payload(code, str(e))) from None

    async def _propose(self, group: int, command: Command | _Raw) -> object:
        data = command.data if isinstance(command, _Raw) else encode_command(command)
        try:
            return await self.raft.propose(group, data, timeout=self.cfg.request_timeout)
        except TimeoutError:
            raise OutcomeUnknown("the change was not applied in time; outcome unknown") from None
        except RaftOverloaded as e:
            raise Overloaded(str(e)) from None

    def _group_of(self, name: str) -> int:
        group = self.catalog.group_of(name)
        if group is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        return group

    def _machine(self, args: Wire) -> QueueMachine:
        return self.machines[int(args["_group"])]

    # -- QueueService ----------------------------------------------------------------------------
    async def create_queue(self, name: str, attributes: QueueAttributes) -> bool:
        check_queue_name(name)
        if attributes.dead_letter_queue == name:
            raise InvalidParameter("a queue cannot be its own dead-letter queue")
        placed = await self._run(META_GROUP, "meta", {"assign": name})
        group = int(placed["group"])
        res = await self._run(group, "create", {"name": name, "attributes": attributes.to_dict()})
        return bool(res["created"])

    async def list_queues(self) -> list[str]:
        return self.catalog.names()

    async def get_queue(self, name: str) -> tuple[QueueAttributes, QueueStats]:
        check_queue_name(name)
        res = await self._run(self._group_of(name), "get", {"name": name})
        return QueueAttributes.from_dict(res["attributes"]), QueueStats(**res["stats"])

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        check_queue_name(name)
        QueueAttributes.check_changes(changes)  # validate before anything is sent anywhere
        res = await self._run(
            self._group_of(name), "set_attributes", {"name": name, "changes": changes}
        )
        return QueueAttributes.from_dict(res["attributes"])

    async def delete_queue(self, name: str) -> None:
        check_queue_name(name)
        await self._run(self._group_of(name), "delete", {"name": name})
        await self._run(META_GROUP, "meta", {"remove": name})

    async def purge(self, name: str) -> int:
        check_queue_name(name)
        res = await self._run(self._group_of(name), "purge", {"name": name})
        return int(res["purged"])

    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]:
        check_queue_name(name)
        group = self._group_of(name)
        attrs = self.machines[group].attributes(name)
        if attrs is not None:  # fail early; apply decides with the committed attributes
            for m in messages:
                if len(m.body) > attrs.max_message_size:
                    raise MessageTooLarge(
                        f"a message body has {len(m.body)} bytes; the queue allows "
                        f"{attrs.max_message_size}"
                    )
        await self._take_send_slot()
        try:
            sent: list[SentMessage] = await self._run(
                group, "send", {"name": name, "messages": messages}
            )
        finally:
            self._send_slots.release()
        return sent

    async def _take_send_slot(self) -> None:
        """One of the `NodeConfig.max_inflight_sends` slots; `Overloaded` if none frees up
        within the request deadline."""
        if self._send_slots.locked():
            try:
                async with asyncio.timeout(self.cfg.request_timeout):
                    await self._send_slots.acquire()
            except TimeoutError:
                raise Overloaded(
                    f"{self.cfg.max_inflight_sends} sends in flight on this node; retry"
                ) from None
        else:
            await self._send_slots.acquire()

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait_seconds: int | None,
    ) -> list[ReceivedMessage]:
        check_queue_name(name)
        args = {
            "name": name,
            "max": max_messages,
            "visibility": visibility_timeout,
            "wait": wait_seconds,
        }
        received: list[ReceivedMessage] = await self._run(self._group_of(name), "receive", args)
        return received

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        check_queue_name(name)
        res = await self._run(self._group_of(name), "ack", {"name": name, "receipts": receipts})
        return _entry_results(receipts, res)

    async def change_visibility(
        self, name: str, entries: list[tuple[str, int]]
    ) -> list[EntryResult]:
        check_queue_name(name)
        wire = {"name": name, "entries": [list(e) for e in entries]}
        res = await self._run(self._group_of(name), "visibility", wire)
        return _entry_results([r for r, _ in entries], res)

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        check_queue_name(name)
        res = await self._run(
            self._group_of(name),
            "nack",
            {"name": name, "receipts": receipts, "delay": delay_seconds},
        )
        return _entry_results(receipts, res)

    # -- operations at the group leader (wire form in and out) -----------------------------------
    async def _op_meta(self, args: Wire) -> Wire:
        if "register" in args:
            reg = args["register"]
            cmd = CatalogMachine.register_node(int(reg["node"]), reg["address"], reg["data_dirs"])
            await self._propose(META_GROUP, _Raw(cmd))
            return {}
        if "assign" in args:
            res = await self._propose(META_GROUP, _Raw(CatalogMachine.assign(args["assign"])))
            if not isinstance(res, Assignment):
                raise InvariantBroken(f"catalog returned {res!r}")
            return {"group": res.group}
        await self._propose(META_GROUP, _Raw(CatalogMachine.remove(args["remove"])))
        return {}

    def _attributes(self, args: Wire) -> QueueAttributes:
        attrs = self._machine(args).attributes(args["name"])
        if attrs is None:
            raise QueueNotFound(f"queue {args['name']!r} does not exist")
        return attrs

    async def _op_create(self, args: Wire) -> Wire:
        attrs = QueueAttributes.from_dict(args["attributes"])
        res = await self._propose(int(args["_group"]), CreateQueue(args["name"], attrs, now_ms()))
        if isinstance(res, CommandFailed):
            raise _failure(res)
        if not isinstance(res, Created):
            raise InvariantBroken(f"create returned {res!r}")
        return {"created": res.created}

    async def _op_delete(self, args: Wire) -> Wire:
        _check(await self._propose(int(args["_group"]), DeleteQueue(args["name"])))
        return {}

    async def _op_get(self, args: Wire) -> Wire:
        attrs = self._attributes(args)
        stats = self._machine(args).stats(args["name"], now_ms())
        if stats is None:
            raise QueueNotFound(f"queue {args['name']!r} does not exist")
        return {"attributes": attrs.to_dict(), "stats": _stats_wire(stats)}

    async def _op_set_attributes(self, args: Wire) -> Wire:
        merged = self._attributes(args).merged(args["changes"])
        _check(await self._propose(int(args["_group"]), SetAttributes(args["name"], merged)))
        return {"attributes": merged.to_dict()}

    async def _op_purge(self, args: Wire) -> Wire:
        res = await self._propose(int(args["_group"]), Purge(args["name"], now_ms()))
        _check(res)
        return {"purged": res.count if isinstance(res, Purged) else 0}

    def _next_id(self) -> str:
        self._id_counter += 1
        return f"{self._id_prefix}{self.id:02x}{self._id_counter:012x}"

    def _produce_command(self, args: Wire) -> bytes:
        """The encoded `Produce` for a send's ``args`` (``name``, ``messages``), with fresh ids
        and this node's clock; any node builds it, the group's leader proposes it."""
        messages: list[OutgoingMessage] = args["messages"]
        new = tuple(
            NewMessage(
                id=self._next_id(),
                body=m.body,
                binary=m.binary,
                attributes=m.attributes,
                delay_ms=None if m.delay_seconds is None else m.delay_seconds * 1000,
                dedup_id=m.dedup_id,
            )
            for m in messages
        )
        return encode_command(Produce(args["name"], now_ms(), new))

    async def _op_send(self, args: Wire) -> list[SentMessage]:
        """Propose a send: ``args["command"]`` (built by a forwarding node) or one built here."""
        command = args.get("command")
        data = command if isinstance(command, bytes) else self._produce_command(args)
        res = await self._propose(int(args["_group"]), _Raw(data))
        _check(res)
        if not isinstance(res, Produced):
            raise InvariantBroken(f"produce returned {res!r}")
        return [SentMessage(i, s) for i, s in res.messages]

    async def _op_receive(self, args: Wire) -> list[ReceivedMessage]:
        name = args["name"]
        group = int(args["_group"])
        machine = self._machine(args)
        attrs = self._attributes(args)
        wait = attrs.receive_wait_seconds if args["wait"] is None else int(args["wait"])
        wait = max(0, min(wait, MAX_WAIT_SECONDS))
        visibility = args["visibility"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            if machine.has_visible(name, now_ms()):
                res = await self._propose(
                    group,
                    Lease(
                        name,
                        now_ms(),
                        int(args["max"]),
                        None if visibility is None else int(visibility) * 1000,
                    ),
                )
                _check(res)
                if not isinstance(res, Leased):
                    raise InvariantBroken(f"lease returned {res!r}")
                if res.messages:
                    return self._render_leased(machine, name, res)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            await self._wait_for_change(machine, name, remaining)

    def _render_leased(
        self, machine: QueueMachine, name: str, res: Leased
    ) -> list[ReceivedMessage]:
        stored = {m.seq: m for m in machine.read(name, [m.seq for m in res.messages])}
        out = []
        for lm in res.messages:
            sm = stored.get(lm.seq)
            if sm is None:
                raise InvariantBroken(f"leased message {name}/{lm.seq} cannot be read")
            out.append(
                ReceivedMessage(
                    id=lm.id,
                    seq=lm.seq,
                    body=sm.body,
                    binary=sm.binary,
                    receipt=self.signer.mint(name, lm.seq, lm.lease_id),
                    receive_count=lm.receive_count,
                    sent_at_ms=lm.sent_at_ms,
                    attributes=sm.attributes,
                )
            )
        return out

    async def _wait_for_change(self, machine: QueueMachine, name: str, limit: float) -> None:
        """Sleep until the queue may have a visible message, or ``limit`` seconds."""
        nxt = machine.next_visible_at(name)
        if nxt is not None:
            limit = min(limit, max(0.001, (nxt - now_ms()) / 1000))
        event = self._wakeups.setdefault(name, asyncio.Event())
        event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), limit)

    def _on_change(self, queue: str) -> None:
        event = self._wakeups.get(queue)
        if event is not None:
            event.set()

    def _verified(self, name: str, receipts: list[Any]) -> tuple[list[str | None], list[Any]]:
        """Per receipt: None when it verified (its (seq, lease) is in the second list at the
        same position), or the error code."""
        codes: list[str | None] = []
        verified: list[Any] = []
        for r in receipts:
            try:
                verified.append(self.signer.verify(name, r))
                codes.append(None)
            except ReceiptInvalid as e:
                verified.append(None)
                codes.append(e.code)
        return codes, verified

    async def _entries_op(
        self,
        args: Wire,
        receipts: list[Any],
        make: Callable[[list[tuple[int, int, int]]], Command],
    ) -> Wire:
        """Verify ``receipts``; propose ``make([(position, seq, lease), ...])`` for the valid
        ones; merge its per-entry outcomes with the receipt errors, in request order."""
        codes, verified = self._verified(args["name"], receipts)
        valid = [(i, v[0], v[1]) for i, v in enumerate(verified) if v is not None]
        if valid:
            res = await self._propose(int(args["_group"]), make(valid))
            _check(res)
            if not isinstance(res, EntryOutcomes):
                raise InvariantBroken(f"entries command returned {res!r}")
            outcomes = iter(res.outcomes)
            codes = [next(outcomes) if c is None else c for c in codes]
        return {"errors": codes}

    async def _op_ack(self, args: Wire) -> Wire:
        now = now_ms()
        return await self._entries_op(
            args,
            list(args["receipts"]),
            lambda v: Ack(args["name"], now, tuple((s, lease) for _, s, lease in v)),
        )

    async def _op_visibility(self, args: Wire) -> Wire:
        now = now_ms()
        entries = list(args["entries"])
        timeouts = [int(t) * 1000 for _, t in entries]
        return await self._entries_op(
            args,
            [r for r, _ in entries],
            lambda v: ChangeVisibility(
                args["name"], now, tuple((s, lease, timeouts[i]) for i, s, lease in v)
            ),
        )

    async def _op_nack(self, args: Wire) -> Wire:
        now = now_ms()
        delay = int(args["delay"]) * 1000
        return await self._entries_op(
            args,
            list(args["receipts"]),
            lambda v: Nack(args["name"], now, tuple((s, lease) for _, s, lease in v), delay),
        )

    # -- housekeeping: retention and dead letters, proposed by each group's leader -------------
    def _registration(self) -> dict[str, Any]:
        return {
            "address": f"{self.cfg.peer.host}:{self.cfg.peer.port}",
            "data_dirs": [os.path.abspath(d) for d in self.cfg.data_dirs],
        }

    async def _register(self) -> None:
        """Record this node (address, data directories) in the catalog if it is not there."""
        reg = self._registration()
        if self.catalog.node_info(self.id) == reg:
            return
        try:
            await self._run(META_GROUP, "meta", {"register": {"node": self.id, **reg}})
        except (CmqError, RaftError) as e:
            log.info("catalog registration deferred: %s", e)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.housekeeping_interval)
            await self._register()
            for g, machine in self.machines.items():
                if self.raft.status(g).leader != self.id:
                    continue
                for name in machine.queue_names():
                    try:
                        await self._housekeep_queue(g, machine, name)
                    except (CmqError, RaftError) as e:
                        log.info("housekeeping of %s deferred: %s", name, e)

    async def _housekeep_queue(self, group: int, machine: QueueMachine, name: str) -> None:
        now = now_ms()
        if machine.expirable(name, now):
            await self._propose(group, Expire(name, now))
        seqs = machine.pending_dead_letters(name)
        attrs = machine.attributes(name)
        if not seqs or attrs is None or not attrs.dead_letter_queue:
            return
        # At-least-once move: copy into the dead-letter queue, then delete here.
        stored = machine.read(name, seqs[:100])
        if stored:
            copies = [
                OutgoingMessage(
                    body=m.body,
                    binary=m.binary,
                    delay_seconds=0,
                    attributes=m.attributes,
                    dedup_id=f"dlq:{name}:{m.id}"[:128],
                )
                for m in stored
            ]
            await self.send(attrs.dead_letter_queue, copies)
            await self._propose(group, DeadLetter(name, tuple(m.seq for m in stored)))

    # -- status ----------------------------------------------------------------------------------
    def status(self) -> Wire:
        """This node's view of every group: role, term, leader, commit/applied, follower lag."""
        groups = {}
        for g in (META_GROUP, *self.data_groups):
            st = self.raft.status(g)
            groups[str(g)] = {
                "role": st.role.name.lower(),
                "term": st.term,
                "leader": st.leader,
                "commit": st.commit,
                "applied": st.applied,
                "last_index": st.last_index,
                "voters": list(st.conf.voters),
                "lag": {
                    str(p): st.last_index - ps.match for p, ps in st.peers.items() if p != self.id
                },
            }
        placement = {name: self.catalog.group_of(name) for name in self.catalog.names()}
        return {
            "node": self.id,
            "groups": groups,
            "queues": len(placement),
            "placement": placement,
            "nodes": {str(n): info for n, info in sorted(self.catalog.nodes.items())},
            "data_groups": {
                str(g): info | {"data_dirs": {str(n): d for n, d in info["data_dirs"].items()}}
                for g, info in self.catalog.groups().items()
            },
        }


def _decode_wire(reply: bytes) -> Wire:
    data = orjson.loads(reply)
    if not isinstance(data, dict):
        raise InvariantBroken("malformed forwarded reply")
    return data


def _encode_sent(sent: list[SentMessage]) -> bytes:
    return orjson.dumps([[m.id, m.seq] for m in sent])


def _decode_sent(reply: bytes) -> list[SentMessage]:
    return [SentMessage(str(i), int(s)) for i, s in orjson.loads(reply)]


@dataclass(frozen=True, slots=True)
class _Op:
    """An operation run at a group's leader: ``run`` takes the request's wire arguments (plus
    ``_group``); a forwarded call's reply is ``encode(result)`` there and ``decode(reply)`` on the
    node that forwarded it."""

    run: Callable[[Wire], Awaitable[Any]]
    encode: Callable[[Any], bytes] = orjson.dumps
    decode: Callable[[bytes], Any] = _decode_wire
    retry_unknown: Callable[[Wire], bool] = lambda args: True
    """Whether an attempt with an unknown outcome may be retried: yes when a repeat is
    harmless (reads, idempotent admin steps, leases: a lost lease only delays its messages;
    acks: a repeat reports the already-deleted entries as stale)."""


def _deduplicated(args: Wire) -> bool:
    """A send may be repeated only when every message carries a ``dedup_id``."""
    messages: list[OutgoingMessage] = args["messages"]
    return all(m.dedup_id is not None for m in messages)


@dataclass(frozen=True, slots=True)
class _Raw:
    """An already-encoded command (the catalog's JSON commands)."""

    data: bytes


def _error_payload(code: str, message: str) -> bytes:
    return orjson.dumps({"error": code, "message": message})


_ERRORS: dict[str, type[CmqError]] = {
    cls.code: cls
    for cls in (
        InvalidParameter,
        QueueNotFound,
        QueueAlreadyExists,
        MessageTooLarge,
        Overloaded,
        Unavailable,
        OutcomeUnknown,
        ReceiptInvalid,
        InvariantBroken,
    )
}


def _decode_error(payload: bytes) -> CmqError | None:
    """The error a peer replied with; None when the call should simply be routed again
    (a leader change on the peer)."""
    try:
        data = orjson.loads(payload)
        code, message = str(data["error"]), str(data.get("message", ""))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return Unavailable(payload.decode("utf-8", "replace"))
    if code == "Retry":
        return None
    return _ERRORS.get(code, CmqError)(message)


def _failure(res: CommandFailed) -> CmqError:
    return _ERRORS.get(res.code, CmqError)(res.message)


def _check(res: object) -> None:
    if isinstance(res, CommandFailed):
        raise _failure(res)


def _entry_results(receipts: list[str], res: Wire) -> list[EntryResult]:
    return [
        EntryResult(r, err is None, err) for r, err in zip(receipts, res["errors"], strict=True)
    ]


def _stats_wire(s: QueueStats) -> Wire:
    return {
        "visible": s.visible,
        "in_flight": s.in_flight,
        "delayed": s.delayed,
        "sent_total": s.sent_total,
        "acked_total": s.acked_total,
        "dead_lettered_total": s.dead_lettered_total,
        "expired_total": s.expired_total,
        "oldest_age_ms": s.oldest_age_ms,
    }
