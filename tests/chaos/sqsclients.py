"""The ``sqs`` surface of a chaos run: boto3 against cmq's SQS endpoint (the JSON protocol, any
key: signatures are not checked), one client per node, called in threads (boto3 blocks), every
call recorded like the native ones.

* Producer (``sqs-producer-0``): SendMessageBatch of 1-5 messages to a seeded node. A standard
  queue takes no deduplication id over SQS, so an unknown outcome is never resent (a resend
  could store a message twice: reported as `duplicated`, not failed). Entries the answer lists
  under ``Failed`` are recorded as a failed send of their own.
* Consumer (``sqs-consumer-0``): ReceiveMessage (1-5 messages, seeded visibility, long poll 0
  or 1 s, ``ApproximateReceiveCount``), then DeleteMessageBatch for the acks and
  ChangeMessageVisibilityBatch to 0 for the nacks (recorded as ack and nack ops, per entry).
  A delivered message is named by a number derived from its ``MessageId`` (SQS has no seq for
  a standard queue's message; ids are unique per stored message).
* `redrive`: the dead-letter surface's StartMessageMoveTask back to the source queue.

Outcomes: an HTTP 4xx answer or a connection that could not be opened is ``failed``; read
timeouts, dropped connections and 5xx answers are ``unknown``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
)

from tests.chaos.history import Delivery, Outcome
from tests.chaos.surfaces import DLQ_QUEUE, SQS_QUEUE

if TYPE_CHECKING:
    from tests.chaos.workload import Workload

T = TypeVar("T")
ACCOUNT = "000000000000"
MOVE_TIMEOUT = 90.0
CLOCK_BOUND = 0.5
"""Seconds a lease's deadline may be early in real time (the stamping leader's clock)."""


def seq_of(message_id: str) -> int:
    """A stable number for a message id (the checker names a stored message by queue and seq)."""
    return int(hashlib.sha256(message_id.encode()).hexdigest()[:15], 16)


def classify(e: Exception) -> tuple[Outcome, str]:
    """The outcome of a boto3 call that raised ``e``."""
    if isinstance(e, ClientError):
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        code = e.response.get("Error", {}).get("Code", "")
        return ("failed" if 400 <= status < 500 else "unknown"), f"{status} {code}"
    if isinstance(e, EndpointConnectionError | ConnectTimeoutError):
        return "failed", f"connect: {e}"[:200]
    return "unknown", f"{type(e).__name__}: {e}"[:200]


class SqsClients:
    """boto3 clients on every node of a run, and the SQS producer and consumer (module doc).
    Built in a thread (creating boto3 clients is slow and blocking)."""

    def __init__(self, workload: Workload) -> None:
        self.w = workload
        config = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=2,
            read_timeout=workload.cfg.request_timeout,
        )
        session = boto3.session.Session()
        self.urls = dict(workload.urls)
        self.clients: dict[int, Any] = {
            n: session.client(
                "sqs",
                endpoint_url=url,
                region_name="us-east-1",
                aws_access_key_id="chaos",
                aws_secret_access_key="chaos",
                config=config,
            )
            for n, url in sorted(self.urls.items())
        }

    def queue_url(self, node: int, queue: str) -> str:
        return f"{self.urls[node]}/{ACCOUNT}/{queue}"

    async def call(self, fn: Callable[[], T]) -> tuple[Outcome, T | None, str]:
        """Run one blocking boto3 call in a thread: (outcome, result when ok, detail)."""
        try:
            return "ok", await asyncio.to_thread(fn), ""
        except Exception as e:  # every boto3/botocore failure is classified, none escapes
            outcome, detail = classify(e)
            return outcome, None, detail

    async def produce(self) -> None:
        """SendMessageBatch until the producers stop."""
        process = "sqs-producer-0"
        client = self.w.client
        assert client is not None
        batch = 0
        while self.w.producing:
            batch += 1
            rng = self.w.choices(process, batch)
            node = rng.choice(sorted(self.urls))
            keys = [f"{self.w.tag}-qp-{batch}-{k}" for k in range(rng.randint(1, 5))]
            entries = [{"Id": f"e{i}", "MessageBody": self.w.body(k)} for i, k in enumerate(keys)]
            sqs, url = self.clients[node], self.queue_url(node, SQS_QUEUE)
            op = client.begin(process, "send", SQS_QUEUE, node)
            op.keys = list(keys)
            outcome, got, detail = await self.call(
                functools.partial(sqs.send_message_batch, QueueUrl=url, Entries=entries)
            )
            refused = {f["Id"]: f for f in (got or {}).get("Failed", [])}
            if refused:
                op.keys = [k for i, k in enumerate(keys) if f"e{i}" not in refused]
                detail = f"{len(refused)} entries refused"
            client.end(op, outcome, detail)
            if refused:
                bad = client.begin(process, "send", SQS_QUEUE, node)
                bad.keys = [k for i, k in enumerate(keys) if f"e{i}" in refused]
                sender = all(f.get("SenderFault") for f in refused.values())
                client.end(
                    bad, "failed" if sender else "unknown", str(list(refused.values()))[:200]
                )
            await asyncio.sleep(rng.uniform(0.05, 0.15))

    async def consume(self) -> None:
        """ReceiveMessage, then delete or release per fate, until the consumers stop."""
        process = "sqs-consumer-0"
        client = self.w.client
        assert client is not None
        turn = 0
        while self.w.consuming:
            turn += 1
            rng = self.w.choices(process, turn)
            draining = self.w.draining
            node = rng.choice(sorted(self.urls))
            vis = 10 if draining else rng.choice(self.w.cfg.visibilities)
            wait = 1 if draining else rng.choice([0, 1])
            count = 10 if draining else rng.randint(1, self.w.cfg.receive_max)
            sqs, url = self.clients[node], self.queue_url(node, SQS_QUEUE)
            op = client.begin(process, "receive", SQS_QUEUE, node)
            op.visibility = float(vis)
            outcome, got, detail = await self.call(
                functools.partial(
                    sqs.receive_message,
                    QueueUrl=url,
                    MaxNumberOfMessages=count,
                    VisibilityTimeout=vis,
                    WaitTimeSeconds=wait,
                    AttributeNames=["ApproximateReceiveCount"],
                )
            )
            if got is not None:
                op.deliveries = [
                    Delivery(
                        self.w.key_of(m["Body"]),
                        seq_of(m["MessageId"]),
                        m["ReceiptHandle"],
                        int(m.get("Attributes", {}).get("ApproximateReceiveCount", 0)),
                    )
                    for m in got.get("Messages", [])
                ]
            client.end(op, outcome, detail)
            if outcome != "ok":
                await asyncio.sleep(0.05)
                continue
            if not op.deliveries:
                self.w.empty_receives += 1
                continue
            self.w.empty_receives = 0
            fates = [self.w.fate(SQS_QUEUE, d) for d in op.deliveries]
            for kind in ("ack", "nack"):
                chosen = [d for d, f in zip(op.deliveries, fates, strict=True) if f == kind]
                if chosen:
                    node = rng.choice(sorted(self.urls))
                    await self._settle(process, kind, node, chosen, op.start + vis)

    async def _settle(
        self, process: str, kind: str, node: int, chosen: list[Delivery], lease_end: float
    ) -> None:
        """Delete (``ack``) or release (``nack``) ``chosen``. A delete answers a stale receipt
        (its lease ran out and the message was received again) as successful without deleting
        it, as SQS does (`api.sqs.message_ops`): an entry counts as a confirmed ack only if the
        call ended while its lease surely ran (before ``lease_end``, its receive's start plus
        the visibility, less the clock bound); later ones are recorded as not confirmed."""
        client = self.w.client
        assert client is not None
        sqs, url = self.clients[node], self.queue_url(node, SQS_QUEUE)
        op = client.begin(process, "ack" if kind == "ack" else "nack", SQS_QUEUE, node)
        op.receipts = [d.receipt for d in chosen]
        op.keys = [d.key for d in chosen]
        entries: list[dict[str, Any]] = [
            {"Id": f"e{i}", "ReceiptHandle": r} for i, r in enumerate(op.receipts)
        ]
        if kind == "ack":
            outcome, got, detail = await self.call(
                functools.partial(sqs.delete_message_batch, QueueUrl=url, Entries=entries)
            )
        else:
            for e in entries:
                e["VisibilityTimeout"] = 0
            outcome, got, detail = await self.call(
                functools.partial(
                    sqs.change_message_visibility_batch, QueueUrl=url, Entries=entries
                )
            )
        if got is not None:
            done = {s["Id"] for s in got.get("Successful", [])}
            sure = kind != "ack" or client.clock() < lease_end - CLOCK_BOUND
            op.entry_ok = [f"e{i}" in done and sure for i in range(len(entries))]
            detail = ",".join(sorted({f.get("Code", "") for f in got.get("Failed", [])}))
        client.end(op, outcome, detail)

    def redrive(self) -> tuple[Outcome, str]:
        """Move the dead-letter queue's messages back to its source (StartMessageMoveTask, no
        destination: the one queue naming it) and wait for the task to end (blocking)."""
        deadline = time.monotonic() + MOVE_TIMEOUT
        nodes = sorted(self.clients)
        last = ""
        for attempt in range(10):
            sqs = self.clients[nodes[attempt % len(nodes)]]
            try:
                url = self.queue_url(nodes[attempt % len(nodes)], DLQ_QUEUE)
                arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
                arn = arn["Attributes"]["QueueArn"]
                sqs.start_message_move_task(SourceArn=arn)
                break
            except Exception as e:  # retried on the next node
                last = classify(e)[1]
                time.sleep(0.5)
        else:
            return "failed", f"could not start the move task: {last}"
        while time.monotonic() < deadline:
            try:
                tasks = sqs.list_message_move_tasks(SourceArn=arn).get("Results", [])
            except Exception as e:  # polled again
                last = classify(e)[1]
                tasks = []
            if tasks and tasks[0]["Status"] in {"COMPLETED", "FAILED", "CANCELLED"}:
                t = tasks[0]
                outcome: Outcome = "ok" if t["Status"] == "COMPLETED" else "failed"
                return outcome, f"{t['Status']} moved {t.get('ApproximateNumberOfMessagesMoved')}"
            time.sleep(0.5)
        return "unknown", f"the move task did not end within {MOVE_TIMEOUT:.0f}s {last}"
