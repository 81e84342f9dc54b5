"""Read one released segment from the cluster and check it end to end (contract §2), then hand
it over as `pyarrow.RecordBatch`es of `ARROW_SCHEMA`.

`read_segment` tries the task's replicas in order (followers first: `order_replicas`). Each is
asked for the binary form (`cmq.archive.segdata`: the stored bytes, decoded into columns with
numpy, no Python object per record); a node that answers the JSON lines instead (an older
release, or the ``segment_read_binary`` flag not enabled yet) is read in that form. A replica
fails when it cannot be reached, answers an error, or its stream does not check out. JSON lines:
a line that is not a record, a seq out of order or outside the segment, no trailer (the stream
was cut), a trailer whose count or ``stream_crc`` differs from what arrived, a ``checksum``
differing from the listing's, or a count differing from the listing's. Binary: the checks of
`cmq.archive.segdata` (the stream's CRC, the stored bytes' CRC against the listing's checksum,
framing, seqs, counts). Nothing is yielded before a segment checked out, so a failing replica
never leaks rows: a segment is held in memory (its columns) until it is verified. When every
replica failed, `SegmentUnreadable` names each reason.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import urllib.error
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson
import pyarrow as pa

from cmq.archive import segdata
from cmq.archive.auth import open_url
from cmq.archive.errors import ReplicaFailed, SegmentUnreadable
from cmq.archive.remote import ClusterClient, Segment, queue_path

OUTCOMES = frozenset({"acked", "expired", "dead_lettered", "purged"})
BATCH_ROWS = 8192
"""Rows per RecordBatch handed to Spark."""

ARROW_SCHEMA = pa.schema(
    [
        pa.field("queue", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("id", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("sent_at", pa.timestamp("us", tz="UTC")),
        pa.field("receive_count", pa.int32()),
        pa.field("attributes", pa.map_(pa.string(), pa.string())),
        pa.field("outcome", pa.string()),
        pa.field("priority", pa.int32()),
        pa.field("batch_id", pa.string()),
    ]
)
"""The rows' columns as Spark's Python data source expects them (Spark keeps timestamps in
microseconds; the values are whole milliseconds: ``sent_at_ms * 1000``). ``priority``: the
message's level as sent (0 when it had none, and from a node whose lines do not carry it)."""
_ROW_SCHEMA = pa.schema([ARROW_SCHEMA.field(i) for i in range(len(ARROW_SCHEMA) - 1)])


class SegmentTask(msgspec.Struct, frozen=True):
    """One segment to read: where it is, what the listing promised, and the replicas (URLs) to
    try, in order."""

    queue: str
    first_seq: int
    last_seq: int
    count: int
    checksum: str
    replicas: tuple[str, ...]
    bytes: int = 0
    """The segment's stored size as listed (for reporting only)."""


@dataclass(slots=True)
class _Columns:
    seq: list[int] = field(default_factory=list)
    id: list[str] = field(default_factory=list)
    body: list[bytes] = field(default_factory=list)
    sent_at: list[int] = field(default_factory=list)
    receive_count: list[int] = field(default_factory=list)
    attributes: list[list[tuple[str, str]]] = field(default_factory=list)
    outcome: list[str] = field(default_factory=list)
    priority: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class VerifiedSegment:
    """A segment's rows, checked end to end (against the stream's trailer or CRC and the
    listing), as a table of `ARROW_SCHEMA` without ``batch_id``; ``binary``: read in the
    binary form (else the JSON lines of a node without it)."""

    task: SegmentTask
    replica: str
    table: pa.Table
    stream_crc: str
    binary: bool = False

    @property
    def rows(self) -> int:
        return int(self.table.num_rows)

    def batches(self, batch_id: str | None, rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        for start in range(0, self.rows, rows):
            part = self.table.slice(start, rows)
            n = part.num_rows
            arrays = [part.column(i).combine_chunks() for i in range(part.num_columns)]
            yield pa.RecordBatch.from_arrays(
                [*arrays, segdata.constant(batch_id, n)], schema=ARROW_SCHEMA
            )


def _table(task: SegmentTask, c: _Columns) -> pa.Table:
    """The JSON lines' columns as a table of `ARROW_SCHEMA` without ``batch_id``."""
    n = len(c.seq)
    return pa.Table.from_arrays(
        [
            segdata.constant(task.queue, n),
            pa.array(c.seq, pa.int64()),
            pa.array(c.id, pa.string()),
            pa.array(c.body, pa.binary()),
            pa.array([ms * 1000 for ms in c.sent_at], ARROW_SCHEMA[4].type),
            pa.array(c.receive_count, pa.int32()),
            pa.array(c.attributes, ARROW_SCHEMA[6].type),
            pa.array(c.outcome, pa.string()),
            pa.array(c.priority, pa.int32()),
        ],
        schema=_ROW_SCHEMA,
    )


def order_replicas(
    urls: Sequence[str], node_of: Mapping[str, int | None], leader: int | None, spread: int = 0
) -> tuple[str, ...]:
    """``urls`` ordered for reading: followers first (rotated by ``spread`` so segments spread
    over them), then the leader, then URLs whose node is unknown (unreachable at planning)."""
    followers = [u for u in urls if node_of.get(u) is not None and node_of.get(u) != leader]
    leaders = [u for u in urls if node_of.get(u) is not None and node_of.get(u) == leader]
    unknown = [u for u in urls if node_of.get(u) is None]
    if followers:
        k = spread % len(followers)
        followers = followers[k:] + followers[:k]
    return (*followers, *leaders, *unknown)


def _fail(url: str, task: SegmentTask, what: str) -> ReplicaFailed:
    return ReplicaFailed(f"{url}: segment {task.queue}/{task.first_seq}: {what}")


def _record(url: str, task: SegmentTask, obj: Any, cols: _Columns) -> None:
    try:
        seq = int(obj["seq"])
        body = base64.b64decode(obj["body_b64"], validate=True)
        attrs = obj.get("attributes") or {}
        outcome = str(obj["outcome"])
        row = (str(obj["id"]), int(obj["sent_at_ms"]), int(obj["receive_count"]))
        pairs = [(str(k), str(v)) for k, v in attrs.items()]
        priority = int(obj.get("priority", 0))  # absent from an older node's lines: level 0
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as e:
        raise _fail(url, task, f"malformed record line ({e!r})") from None
    if outcome not in OUTCOMES:
        raise _fail(url, task, f"unknown outcome {outcome!r} at seq {seq}")
    if not 0 <= priority <= 255:
        raise _fail(url, task, f"priority {priority} outside 0-255 at seq {seq}")
    if not task.first_seq <= seq <= task.last_seq:
        raise _fail(url, task, f"seq {seq} outside [{task.first_seq}, {task.last_seq}]")
    if cols.seq and seq <= cols.seq[-1]:
        raise _fail(url, task, f"seq {seq} after {cols.seq[-1]}: not in seq order")
    cols.seq.append(seq)
    cols.id.append(row[0])
    cols.sent_at.append(row[1])
    cols.receive_count.append(row[2])
    cols.body.append(body)
    cols.attributes.append(pairs)
    cols.outcome.append(outcome)
    cols.priority.append(priority)


def read_replica(
    url: str, task: SegmentTask, timeout: float, binary: bool = True
) -> VerifiedSegment:
    """Read ``task``'s segment from ``url`` and check it; `ReplicaFailed` on any problem.
    ``binary``: ask for the binary form (``Accept``); a node that answers the JSON lines
    instead (an older release, or the ``segment_read_binary`` flag not enabled yet) is read
    in that form, checked the same way end to end."""
    path = f"{queue_path(task.queue)}/segments/{task.first_seq}/records"
    accept = f"{segdata.MEDIA_TYPE}, application/x-ndjson" if binary else "application/x-ndjson"
    try:
        with open_url(url + path, timeout, headers={"Accept": accept}) as resp:
            kind = resp.headers.get("Content-Type", "").split(";")[0].strip()
            if kind == segdata.MEDIA_TYPE:
                return _read_binary(url, task, resp)
            return _read_json(url, task, resp)
    except urllib.error.HTTPError as e:
        raise _fail(url, task, f"HTTP {e.code}: {e.read()[:200]!r}") from None
    except (OSError, http.client.HTTPException) as e:
        raise _fail(url, task, f"stream failed: {e!r}") from None


def _read_binary(url: str, task: SegmentTask, resp: Any) -> VerifiedSegment:
    try:
        raw = segdata.read_stream(resp.read, task.first_seq, task.checksum)
        table = segdata.decode(raw, task.queue, task.count, ARROW_SCHEMA)
    except segdata.BadStream as e:
        raise _fail(url, task, f"binary read: {e}") from None
    except (pa.ArrowException, IndexError, ValueError) as e:  # a record that does not decode
        raise _fail(url, task, f"binary read: undecodable records ({e!r})") from None
    return VerifiedSegment(task, url, table, f"{raw.stream_crc:08x}", binary=True)


def _read_json(url: str, task: SegmentTask, resp: Any) -> VerifiedSegment:
    """The JSON lines (see the module docstring), checked against their trailer."""
    cols = _Columns()
    crc = 0
    trailer: Any = None
    for line in resp:
        if trailer is not None:
            raise _fail(url, task, "data after the trailer")
        if not line.endswith(b"\n"):
            raise _fail(url, task, "stream cut inside a line (no trailer)")
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _fail(url, task, "a line is not JSON") from None
        if isinstance(obj, dict) and obj.get("end") is True:
            trailer = obj
            continue
        crc = zlib.crc32(line, crc)
        _record(url, task, obj, cols)
    if trailer is None:
        raise _fail(url, task, f"stream cut after {len(cols.seq)} records (no trailer)")
    stream_crc = f"{crc:08x}"
    checks = (
        (trailer.get("count") == len(cols.seq), f"trailer count {trailer.get('count')}"),
        (str(trailer.get("stream_crc", "")).lower() == stream_crc, "stream_crc"),
        (str(trailer.get("checksum", "")).lower() == task.checksum.lower(), "trailer checksum"),
        (len(cols.seq) == task.count, f"listing count {task.count}"),
    )
    for ok, what in checks:
        if not ok:
            got = f"{len(cols.seq)} records, stream_crc {stream_crc}, trailer {trailer}"
            raise _fail(url, task, f"{what} does not match ({got}; listing {task.checksum})")
    return VerifiedSegment(task, url, _table(task, cols), stream_crc)


def read_segment(task: SegmentTask, timeout: float = 60.0, binary: bool = True) -> VerifiedSegment:
    """The first replica of ``task.replicas`` whose stream checks out; `SegmentUnreadable`
    (every reason) when none does. ``binary``: as `read_replica`."""
    reasons: list[str] = []
    for url in task.replicas:
        try:
            return read_replica(url, task, timeout, binary)
        except ReplicaFailed as e:
            reasons.append(e.message)
    raise SegmentUnreadable(
        f"segment {task.queue}/{task.first_seq}: every replica failed: " + " | ".join(reasons)
    )


READ_CONCURRENCY = 4
"""Segments one reader fetches and decodes at once (`read_segments`)."""


def read_segments(
    tasks: Sequence[SegmentTask],
    timeout: float = 60.0,
    binary: bool = True,
    concurrency: int = READ_CONCURRENCY,
) -> Iterator[VerifiedSegment]:
    """Each of ``tasks`` read and verified (`read_segment`), in order, with up to
    ``concurrency`` reads in flight on their own threads (each task's replicas are ordered to
    spread the reads over the followers: `plan_tasks`). Memory: at most ``concurrency``
    segments read ahead of the one handed on. The first `SegmentUnreadable` is raised in
    order, and reads not yet started are cancelled."""
    if concurrency <= 1 or len(tasks) <= 1:
        for t in tasks:
            yield read_segment(t, timeout, binary)
        return
    pending: deque[Future[VerifiedSegment]] = deque()
    todo = iter(tasks)
    with ThreadPoolExecutor(min(concurrency, len(tasks)), "cmq-segment-read") as pool:
        try:
            for t in todo:
                pending.append(pool.submit(read_segment, t, timeout, binary))
                if len(pending) >= concurrency:
                    break
            while pending:
                done = pending.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(pool.submit(read_segment, nxt, timeout, binary))
                yield done
        finally:
            for f in pending:
                f.cancel()


def plan_tasks(
    client: ClusterClient,
    queues: Sequence[str] | None,
    max_segments: int | None = None,
    keep: Callable[[str, Segment], bool] | None = None,
) -> list[SegmentTask]:
    """The released segments of ``queues`` (default: every queue with ``archive`` set) that
    ``keep`` accepts, lowest (queue, first_seq) first, at most ``max_segments``, each with its
    replicas in reading order (followers first, spread over them; the leader last)."""
    names = list(queues) if queues else [q for q in client.queues() if client.queue_archives(q)]
    node_of = client.node_ids()
    tasks: list[SegmentTask] = []
    for queue in sorted(set(names)):
        listing = client.segments(queue, "released")
        for seg in sorted(listing.segments, key=lambda s: s.first_seq):
            if seg.state != "released" or (keep is not None and not keep(queue, seg)):
                continue
            replicas = order_replicas(client.urls, node_of, listing.leader, spread=len(tasks))
            tasks.append(
                SegmentTask(
                    queue, seg.first_seq, seg.last_seq, seg.count, seg.checksum, replicas, seg.bytes
                )
            )
            if max_segments is not None and len(tasks) >= max_segments:
                return tasks
    return tasks
