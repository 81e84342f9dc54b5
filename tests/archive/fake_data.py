"""The synthetic archive data `tests.archive.fake_cluster.FakeCluster` serves: queues
(`FakeQueue`) of segments (`FakeSegment`: its records as the JSON lines of docs/api.md, its file
as a node stores them, the state machine's view of it and its checksum), records with varied
bodies, attributes and outcomes (`make_records`), and what a reader should get from them
(`iter_expected`).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from cmq.fsm.cells import Segment
from cmq.fsm.store import StoredMessage, encode_record


@dataclass
class FakeSegment:
    first_seq: int
    last_seq: int
    records: list[dict[str, Any]]
    state: str = "released"
    claim: tuple[str, int] | None = None  # (batch_id, expires_at_ms)

    def lines(self) -> list[bytes]:
        return [orjson.dumps(r) + b"\n" for r in self.records]

    def stored(self) -> bytes:
        """The segment file: its records as a node stores them (every seq from the first)."""
        out = []
        for r in self.records:
            attrs = tuple(sorted(r["attributes"].items()))
            body = base64.b64decode(r["body_b64"])
            level = r.get("priority", 0)
            m = StoredMessage(r["id"], r["seq"], body, True, attrs, r["sent_at_ms"], level)
            out.append(encode_record(m, r["sent_at_ms"]))
        return b"".join(out)

    def machine_segment(self, data: bytes) -> Segment:
        """The state machine's view of the segment whose file is ``data``."""
        seg = Segment(self.first_seq, 0)
        seg.count, seg.size, seg.crc = len(self.records), len(data), zlib.crc32(data)
        seg.sealed = seg.released = True
        bits = {"expired": seg.expired, "dead_lettered": seg.dead, "purged": seg.purged}
        for rel, r in enumerate(self.records):
            if r["outcome"] in bits:
                bits[r["outcome"]].add(rel)
            if r["receive_count"] != (1 if r["outcome"] == "acked" else 0):
                seg.counts[rel] = r["receive_count"]
        return seg

    @property
    def checksum(self) -> str:
        return f"{zlib.crc32(self.stored()):08x}"


@dataclass
class FakeQueue:
    archive: bool = True
    segments: dict[int, FakeSegment] = field(default_factory=dict)
    next_seq: int = 0


OUTCOMES = ("acked", "acked", "acked", "expired", "dead_lettered", "purged")


def make_records(queue: str, first_seq: int, n: int, sent_at_ms: int) -> list[dict[str, Any]]:
    """``n`` records with distinct ids, varied bodies (binary, empty, large), attributes and
    outcomes; every seq present (a real segment may skip seqs copied forward)."""
    out = []
    for i in range(n):
        seq = first_seq + i
        body = bytes([seq % 256, 0, 255]) + f"{queue}:{seq}".encode() * (1 + seq % 5)
        if seq % 97 == 0:
            body = b""
        out.append(
            {
                "seq": seq,
                "id": f"{queue}-m{seq}",
                "sent_at_ms": sent_at_ms + i * 1000,
                "receive_count": 1 + seq % 3,
                "attributes": {"k": str(seq)} if seq % 2 else {},
                "body_b64": base64.b64encode(body).decode(),
                "outcome": OUTCOMES[seq % len(OUTCOMES)],
                "priority": 3 if seq % 10 == 3 else 0,  # sent at level 3: its record says so
            }
        )
    return out


def iter_expected(records: list[dict[str, Any]]) -> Iterator[tuple[str, int, bytes, str]]:
    for r in records:
        yield r["queue"], r["seq"], base64.b64decode(r["body_b64"]), r["outcome"]
