"""The Celery application of the end-to-end test (tests/celery/test_celery.py), configured from
the environment so a real ``celery worker`` process and the test share it:

- ``CMQ_CELERY_BROKER``: ``sqs://<key>:<secret>@127.0.0.1:<port>`` (a cmq node's HTTP address;
  kombu's SQS transport speaks the SQS protocol to it);
- ``CMQ_CELERY_QUEUE``: the SQS queue the tasks go through (created by the test beforehand);
- ``CMQ_CELERY_RESULTS``: a directory where each execution of a task leaves a file.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from celery import Celery
from celery.exceptions import Reject

QUEUE = os.environ.get("CMQ_CELERY_QUEUE", "celery")
RESULTS = Path(os.environ.get("CMQ_CELERY_RESULTS", "."))

app = Celery("cmq_celery_test", broker=os.environ.get("CMQ_CELERY_BROKER", "sqs://"))
app.conf.update(
    broker_transport_options={
        "region": "us-east-1",
        "is_secure": False,
        "visibility_timeout": 3,  # a rejected or lost task comes back after 3 s
        "wait_time_seconds": 1,
        "polling_interval": 0.1,
    },
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    task_acks_late=True,  # acked after it ran: a worker or leader lost mid-task re-runs it
    task_ignore_result=True,
    worker_enable_remote_control=False,  # no fanout (SNS) exchange
    worker_send_task_events=False,
    worker_prefetch_multiplier=1,
)


def _mark(kind: str, key: str) -> None:
    (RESULTS / f"{kind}-{key}-{uuid.uuid4().hex}").touch()


@app.task(name="record")
def record(key: str) -> str:
    """Leave a file saying ``key`` ran (at least once: a re-run leaves another)."""
    _mark("ran", key)
    return key


@app.task(name="poison", bind=True)
def poison(self: object, key: str) -> None:
    """Always refused: rejected without requeue, so the queue's RedrivePolicy moves the message
    to its dead-letter queue after maxReceiveCount receives."""
    _mark("poison", key)
    raise Reject(f"poisoned task {key}", requeue=False)
