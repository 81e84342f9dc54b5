"""Message move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask):
moving the messages of a dead-letter queue to another queue (by default the one queue whose
RedrivePolicy names it).

A task is committed state: its record (status, destination, counts, owner, heartbeat) lives in
the source queue's catalog metadata under `RECORD`, written when it starts, after every batch
and when it ends, so every node sees it. The moving itself is done by the node that started
it: batches of up to 10 messages are leased from the source, sent to the destination (body and
attributes as they are) and only then deleted from the source (`cmq.redrive.move_batch`, the
same move as the dead-letter move), so a message is never lost (a crash between the send and
the delete can deliver it twice, as SQS's at-least-once allows). A message the destination
refuses (too large for it) stays in the source and fails the task with the reason.
A task whose node stopped (heartbeat older than `STALE_MS`) is resumed by the next node that
lists, starts or cancels tasks of that queue. Cancelling writes `CANCEL` (never the record, so
it cannot race the mover's progress writes); the mover stops before its next batch and records
``CANCELLED``. One task per source queue at a time; its record stays after it ends.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from api.sqs import queues
from api.sqs.calls import Caller, Result, call, integer, required
from api.sqs.errors import InvalidParameterValue, ResourceNotFound, SqsError, from_cmq
from cmq.errors import CmqError, QueueNotFound
from cmq.redrive import move_batch
from cmq.service import QueueService

log = logging.getLogger(__name__)

RECORD = "sqs.move"
CANCEL = "sqs.move.cancel"
"""Catalog metadata: the id of the task a cancel asked to stop (written by the cancel only, so
the mover's progress writes never undo it)."""
STALE_MS = 30_000
BATCH = 10
LEASE_SECONDS = 60
MAX_RATE = 500
MAX_MOVERS = 16
"""Movers one node runs at once (more starts are refused until one ends)."""
RUNNING, CANCELLING = "RUNNING", "CANCELLING"
COMPLETED, CANCELLED, FAILED = "COMPLETED", "CANCELLED", "FAILED"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _handle(source: str, task_id: str) -> str:
    return base64.urlsafe_b64encode(f"{source}/{task_id}".encode()).decode()


def _parse_handle(handle: object) -> tuple[str, str]:
    try:
        source, _, task_id = base64.urlsafe_b64decode(str(handle).encode()).decode().partition("/")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        source, task_id = "", ""
    if not source or not task_id:
        raise ResourceNotFound("The task handle is not valid.")
    return queues.check_name(source), task_id


@dataclass
class MoveTasks:
    """The movers of one node (owned by the SQS handler, which closes them with the app)."""

    service: QueueService
    settings: queues.SqsSettings
    node: str = field(default_factory=lambda: uuid.uuid4().hex)
    _movers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def close(self) -> None:
        movers = list(self._movers.values())
        for task in movers:
            task.cancel()
        await asyncio.gather(*movers, return_exceptions=True)
        self._movers.clear()

    # -- records ----------------------------------------------------------------------------------
    async def record(self, source: str) -> dict[str, Any] | None:
        """The source's task record; its ``Status`` is ``CANCELLING`` while a cancel of a
        running task waits for the mover."""
        meta = await call(self.service.queue_metadata(source))
        text = meta.get(RECORD)
        if text is None:
            return None
        record = dict(orjson.loads(text))
        if record["Status"] == RUNNING and meta.get(CANCEL) == record["TaskId"]:
            record["Status"] = CANCELLING
        return record

    async def write(self, source: str, record: dict[str, Any], *, done: bool = False) -> None:
        """Commit ``record`` (``done``: the task ended, its cancel request is cleared)."""
        stored = {k: v for k, v in record.items() if not (k == "Status" and v == CANCELLING)}
        if record["Status"] == CANCELLING:
            stored["Status"] = RUNNING
        changes = {RECORD: orjson.dumps(stored).decode()}
        await call(self.service.update_metadata(source, changes, [CANCEL] if done else []))

    async def cancel(self, source: str, task_id: str) -> None:
        await call(self.service.update_metadata(source, {CANCEL: task_id}, []))

    def _running_here(self, source: str) -> bool:
        task = self._movers.get(source)
        return task is not None and not task.done()

    async def current(self, source: str) -> dict[str, Any] | None:
        """The source's task record, after resuming it here if its node stopped."""
        record = await self.record(source)
        if (
            record is not None
            and record["Status"] in (RUNNING, CANCELLING)
            and not self._running_here(source)
            and _now_ms() - int(record["beat"]) > STALE_MS
        ):
            if record["Status"] == CANCELLING:
                record["Status"] = CANCELLED
                await self.write(source, record, done=True)
            else:
                self.check_capacity()
                record.update(owner=self.node, beat=_now_ms())
                await self.write(source, record)
                self.spawn(source, record)
        return record

    def check_capacity(self) -> None:
        if len([t for t in self._movers.values() if not t.done()]) >= MAX_MOVERS:
            raise InvalidParameterValue(f"This node already runs {MAX_MOVERS} move tasks.")

    def spawn(self, source: str, record: dict[str, Any]) -> None:
        """Run the mover of ``record`` here (`check_capacity` first)."""
        task = asyncio.ensure_future(self._move(source, record))
        self._movers[source] = task
        task.add_done_callback(lambda t: self._forget(source, t))

    def _forget(self, source: str, task: asyncio.Task[None]) -> None:
        if self._movers.get(source) is task:
            del self._movers[source]

    # -- moving -----------------------------------------------------------------------------------
    async def _move(self, source: str, record: dict[str, Any]) -> None:
        destination = self.settings.name_of_arn(record["DestinationArn"], "DestinationArn")
        rate = record.get("MaxNumberOfMessagesPerSecond")
        failures = 0
        try:
            while True:
                latest = await self.record(source)
                if latest is None or latest.get("TaskId") != record["TaskId"]:
                    return  # the queue was deleted or another task replaced this one
                if latest["Status"] == CANCELLING:
                    record["Status"] = CANCELLED
                    break
                started = time.monotonic()
                try:
                    batch = await call(
                        move_batch(
                            self.service,
                            source,
                            destination,
                            min(BATCH, rate or BATCH),
                            lease_seconds=LEASE_SECONDS,
                            origin="move",
                        )
                    )
                    failures = 0
                except SqsError as e:
                    failures += 1
                    if e.status < 500 or failures >= 5:
                        record.update(Status=FAILED, FailureReason=f"{e.code}: {e.message}")
                        break
                    await asyncio.sleep(1.0)
                    continue
                if batch.done:
                    record["Status"] = COMPLETED
                    break
                moved = batch.moved
                record["ApproximateNumberOfMessagesMoved"] += moved
                if batch.refused:
                    refused = from_cmq(batch.refused[0].error())
                    record.update(Status=FAILED, FailureReason=f"{refused.code}: {refused.message}")
                    break
                record["beat"] = _now_ms()
                await self.write(source, record)
                if rate:
                    await asyncio.sleep(max(0.0, moved / rate - (time.monotonic() - started)))
            record["beat"] = _now_ms()
            await self.write(source, record, done=True)
        except asyncio.CancelledError:
            raise
        except SqsError as e:  # the record could not be written: the task resumes elsewhere
            log.warning("message move task of %s stopped: %s", source, e.message)
        except Exception:
            log.exception(
                "message move task of %s failed", source, extra={"event": "request_failed"}
            )


def _moves(c: Caller) -> MoveTasks:
    if c.moves is None:
        raise InvalidParameterValue("Message move tasks are not available on this endpoint.")
    return c.moves


async def _exists(c: Caller, name: str, parameter: str) -> None:
    try:
        await c.service.get_queue(name)
    except QueueNotFound:
        raise ResourceNotFound(f"{parameter}: the queue does not exist.") from None
    except CmqError as e:
        raise from_cmq(e) from None


async def _sources_of(c: Caller, dlq: str) -> list[str]:
    found = []
    for name in await call(c.service.list_queues()):
        if name == dlq:
            continue
        try:
            attributes, _ = await c.service.get_queue(name)
        except QueueNotFound:
            continue
        except CmqError as e:
            raise from_cmq(e) from None
        if attributes.dead_letter_queue == dlq:
            found.append(name)
    return found


async def start_message_move_task(c: Caller, p: dict[str, Any]) -> Result:
    moves = _moves(c)
    source = c.settings.name_of_arn(required(p, "SourceArn"), "SourceArn")
    rate = integer(p, "MaxNumberOfMessagesPerSecond", 1, MAX_RATE, None)
    await _exists(c, source, "SourceArn")
    sources = await _sources_of(c, source)
    if not sources:
        raise InvalidParameterValue("Source queue must be configured as a Dead Letter Queue.")
    if p.get("DestinationArn") is not None:
        destination = c.settings.name_of_arn(p["DestinationArn"], "DestinationArn")
        if destination == source:
            raise InvalidParameterValue("The destination cannot be the source queue.")
        await _exists(c, destination, "DestinationArn")
    elif len(sources) == 1:
        destination = sources[0]
    else:
        raise InvalidParameterValue(
            "Several queues use this dead-letter queue: give DestinationArn (cmq does not "
            "record each message's original source)."
        )
    record = await moves.current(source)
    if record is not None and record["Status"] in (RUNNING, CANCELLING):
        raise InvalidParameterValue("A message move task is already running on this queue.")
    moves.check_capacity()
    _, stats = await call(c.service.get_queue(source))
    task_id = uuid.uuid4().hex
    record = {
        "TaskId": task_id,
        "TaskHandle": _handle(source, task_id),
        "Status": RUNNING,
        "SourceArn": c.settings.arn(source),
        "DestinationArn": c.settings.arn(destination),
        "ApproximateNumberOfMessagesMoved": 0,
        "ApproximateNumberOfMessagesToMove": stats.visible,
        "StartedTimestamp": _now_ms(),
        "owner": moves.node,
        "beat": _now_ms(),
    }
    if rate is not None:
        record["MaxNumberOfMessagesPerSecond"] = rate
    await moves.write(source, record, done=True)
    moves.spawn(source, record)
    return {"TaskHandle": record["TaskHandle"]}


def _render(record: dict[str, Any]) -> dict[str, Any]:
    status = record["Status"]
    keys = (
        "SourceArn",
        "DestinationArn",
        "MaxNumberOfMessagesPerSecond",
        "ApproximateNumberOfMessagesMoved",
        "ApproximateNumberOfMessagesToMove",
        "FailureReason",
        "StartedTimestamp",
    )
    out: dict[str, Any] = {"Status": status}
    if status in (RUNNING, CANCELLING):
        out["TaskHandle"] = record["TaskHandle"]
    out.update({k: record[k] for k in keys if record.get(k) is not None})
    return out


async def list_message_move_tasks(c: Caller, p: dict[str, Any]) -> Result:
    moves = _moves(c)
    source = c.settings.name_of_arn(required(p, "SourceArn"), "SourceArn")
    integer(p, "MaxResults", 1, 10, 1)
    await _exists(c, source, "SourceArn")
    record = await moves.current(source)
    return {"Results": [] if record is None else [_render(record)]}


async def cancel_message_move_task(c: Caller, p: dict[str, Any]) -> Result:
    moves = _moves(c)
    source, task_id = _parse_handle(required(p, "TaskHandle"))
    try:
        record = await moves.current(source)
    except SqsError:
        record = None
    if record is None or record.get("TaskId") != task_id or record["Status"] != RUNNING:
        raise ResourceNotFound("The task is not running (or does not exist).")
    await moves.cancel(source, task_id)
    return {"ApproximateNumberOfMessagesMoved": record["ApproximateNumberOfMessagesMoved"]}
