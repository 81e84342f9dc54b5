"""The operation history of a chaos run: what every client asked, when, and what came back.

Times are ``time.monotonic()`` seconds of the runner process (clients, fault injector and
checker all live in it), so an operation's ``[start, end]`` brackets the moment the cluster
acted on it. Outcomes are ``ok`` (a definite success), ``failed`` (a definite failure: a 4xx, or
a connection that could not even be opened) and ``unknown`` (timeouts, broken connections,
5xx): an unknown operation may or may not have taken effect.

A message is named by its *key*: its body, which is also its dedup id, unique per run. A
delivered message is identified by ``(queue, seq)``; one key normally has one seq (two seqs for
one key mean the dedup window failed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

Outcome = Literal["ok", "failed", "unknown"]
OpKind = Literal["send", "receive", "ack", "nack", "fault", "create", "move", "rewind"]


@dataclass(slots=True)
class Delivery:
    """One message returned by a receive."""

    key: str
    seq: int
    receipt: str
    receive_count: int


@dataclass(slots=True)
class Op:
    """One client operation (or, with ``kind="fault"``, one fault's injection/heal interval).

    * send: ``keys`` the messages of the batch (each with ``dedup_id = body = key``);
    * receive: ``visibility`` (seconds, as requested) and, when ok, ``deliveries``;
    * ack / nack: ``receipts`` and the ``keys`` they belong to (same order), ``entry_ok`` the
      per-receipt results when the request itself was ok; nack ``delay`` in seconds;
    * send to a FIFO queue: ``groups`` the message group of each key (same order); a send with
      per-message delays: ``delays`` (seconds, same order); a send with scheduled times:
      ``deliver_at`` (the runner's wall clock, epoch seconds; 0 = none; same order) and
      ``wall`` (the runner's wall clock when the op began, to map them onto ``start``'s
      monotonic clock); a send with times to live: ``ttls`` (seconds; 0 = none; same order);
    * create: a queue the workload created, ``detail`` its attributes as JSON (the checker
      learns FIFO queues and dead-letter queues from these records);
    * move: a message move task from the dead-letter queue ``queue`` (``detail``: its end);
    * rewind: ``POST /v1/queues/{queue}/rewind`` to ``since`` (the runner's wall clock, epoch
      seconds), ``wall`` the wall clock when the op began; when ok, ``rewound`` what the
      cluster said it made deliverable again (-1: not known). A send to a queue that is
      rewound records ``wall`` too (the checker compares send times with ``since``).
    """

    index: int
    process: str
    kind: OpKind
    queue: str
    node: int
    start: float
    end: float = 0.0
    outcome: Outcome = "unknown"
    detail: str = ""
    keys: list[str] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)
    entry_ok: list[bool] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    visibility: float = 0.0
    delay: float = 0.0
    groups: list[str] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    deliver_at: list[float] = field(default_factory=list)
    wall: float = 0.0
    ttls: list[float] = field(default_factory=list)
    since: float = 0.0
    rewound: int = -1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Op:
        data = dict(data)
        data["deliveries"] = [Delivery(**d) for d in data.get("deliveries", [])]
        return Op(**data)


class History:
    """Operations in invocation order; optionally mirrored to a JSONL file as they complete."""

    def __init__(self, jsonl: Path | None = None) -> None:
        self.ops: list[Op] = []
        self._file: IO[str] | None = jsonl.open("a") if jsonl is not None else None

    def invoke(self, process: str, kind: OpKind, queue: str, node: int, start: float) -> Op:
        op = Op(
            index=len(self.ops), process=process, kind=kind, queue=queue, node=node, start=start
        )
        self.ops.append(op)
        return op

    def complete(self, op: Op, end: float, outcome: Outcome, detail: str = "") -> None:
        op.end = end
        op.outcome = outcome
        op.detail = detail
        if self._file is not None:
            self._file.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)


def load_jsonl(path: Path) -> list[Op]:
    """Read a history written by `History` (ops in completion order, sorted back by index)."""
    with path.open() as f:
        ops = [Op.from_json(json.loads(line)) for line in f if line.strip()]
    return sorted(ops, key=lambda o: o.index)


def ops_of(ops: Iterable[Op], kind: OpKind) -> list[Op]:
    return [o for o in ops if o.kind == kind]
