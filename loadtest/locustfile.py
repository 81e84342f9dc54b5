"""Locust load test of cmq's native HTTP API: producers, consumers, end-to-end latency, SLO gates.

Producers send batches whose messages carry their send time (attribute ``lt_sent_ms``, ms since
the epoch); consumers long-poll, record each first delivery's end-to-end latency as its own
Locust event (request type ``E2E``, name ``send-to-receive``), and ack in batches. Users are
spread round-robin over every node URL. When the run ends the SLO gates (``slo.py``) set the
exit code. Settings (environment; defaults in brackets):

- ``CMQ_URLS``: comma-separated node URLs [``--host``, itself a comma list, or
  ``http://127.0.0.1:8080``]
- ``LOADTEST_QUEUE``: the queue [a fresh ``loadtest-<time>-<pid>``, deleted at the end; set it
  for distributed runs]
- ``LOADTEST_SHAPE``: ``steps`` | ``soak`` | ``none`` [steps]; ``LOADTEST_SECONDS`` [60],
  ``LOADTEST_STEPS`` [10,20,40], ``LOADTEST_USERS`` [20, soak], ``LOADTEST_SPAWN_RATE`` [10]
- ``LOADTEST_PRODUCER_WEIGHT`` / ``LOADTEST_CONSUMER_WEIGHT`` [1 / 1]
- ``LOADTEST_SEND_RATE``: batches per second per producer [2]; ``LOADTEST_BATCH`` [10];
  ``LOADTEST_BODY_BYTES`` [256]
- ``LOADTEST_RECEIVE_MAX`` [10]; ``LOADTEST_WAIT_SECONDS`` [1]; ``LOADTEST_ACK_BATCH`` [20]
- ``SLO_MAX_FAILURE_RATIO`` [0.01], ``SLO_SEND_P99_MS`` [1000], ``SLO_E2E_P99_MS`` [2000]
- ``LOADTEST_SLO_REPORT``: write the verdict as JSON to this path [not written]

Run: ``make loadtest`` (starts a cluster, see ``run.sh``), or against a running cluster:
``CMQ_URLS=http://127.0.0.1:8080,http://127.0.0.1:8081,http://127.0.0.1:8082
locust -f loadtest/locustfile.py --headless``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent

# Siblings of this file (Locust puts its directory first on sys.path); pure, no Locust inside.
import shapes
import slo
from locust import FastHttpUser, LoadTestShape, constant, constant_throughput, events, task
from locust.env import Environment
from locust.runners import WorkerRunner

from cmq.client import ServerError, SyncClient, TransportError

log = logging.getLogger("cmq.loadtest")

DEFAULT_URL = "http://127.0.0.1:8080"
SENT_ATTR = "lt_sent_ms"
SEND_NAME = "send"
E2E_TYPE = "E2E"
E2E_NAME = "send-to-receive"
MAX_ACK_BATCH = 100  # the API's ack batch limit


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


def parse_urls(raw: str | None) -> list[str]:
    """Node base URLs from a comma- or space-separated list (trailing slashes removed)."""
    if not raw:
        return []
    return [u.strip().rstrip("/") for u in raw.replace(",", " ").split() if u.strip()]


URLS = parse_urls(os.environ.get("CMQ_URLS"))
QUEUE_FROM_ENV = os.environ.get("LOADTEST_QUEUE", "").strip()
QUEUE = QUEUE_FROM_ENV or f"loadtest-{int(time.time())}-{os.getpid()}"
QUEUE_PATH = f"/v1/queues/{urllib.parse.quote(QUEUE, safe='')}"
SHAPE = os.environ.get("LOADTEST_SHAPE", "steps").strip() or "steps"
PLAN = shapes.plan_from_env()
SLO = slo.slo_from_env()
SEND_RATE = _env_float("LOADTEST_SEND_RATE", 2.0)
BATCH = _env_int("LOADTEST_BATCH", 10)
BODY = "x" * _env_int("LOADTEST_BODY_BYTES", 256)
RECEIVE_MAX = _env_int("LOADTEST_RECEIVE_MAX", 10)
WAIT_SECONDS = _env_int("LOADTEST_WAIT_SECONDS", 1)
ACK_BATCH = min(_env_int("LOADTEST_ACK_BATCH", 20), MAX_ACK_BATCH)
VISIBILITY_TIMEOUT = 30
redelivered = 0  # messages received again (receive_count > 1): not counted as E2E samples
stages: dict[int, slo.Stage] = {}  # by the shape's target user count
_environment: Environment | None = None
_stop_requested = False  # by SIGTERM/SIGINT: the shape ends, the run finishes normally


def _error_code(doc: Any) -> str:
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return str(doc["error"].get("code", "?"))
    return "?"


class CmqUser(FastHttpUser):
    """A user bound to one node, picked round-robin over the node URLs."""

    abstract = True
    host = (URLS or [DEFAULT_URL])[0]
    connection_timeout = 5.0
    network_timeout = 30.0  # above the long poll
    _next_url = itertools.count()

    def __init__(self, environment: Environment) -> None:
        urls = URLS or parse_urls(environment.host) or [DEFAULT_URL]
        self.host = urls[next(CmqUser._next_url) % len(urls)]
        super().__init__(environment)

    def post_json(
        self,
        path: str,
        payload: dict[str, Any],
        name: str,
        check: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> dict[str, Any] | None:
        """POST ``payload``; the decoded 200 answer, or ``None`` after recording a failure.

        ``check`` may find fault with a 200 answer (its message fails the request).

        429/503 (overload, no leader) count as failures and are honoured: the user sleeps for
        ``Retry-After`` (at most 5 s). Other failures pause 0.2 s so a dead node is not spun on.
        """
        retry_after = 0.2
        with self.client.post(path, json=payload, name=name, catch_response=True) as resp:
            doc: Any = None
            if resp.content:
                try:
                    doc = resp.json()
                except ValueError:
                    doc = None
            if resp.status_code == 200 and isinstance(doc, dict):
                fault = check(doc) if check else None
                if fault is None:
                    return doc
                resp.failure(fault)
                return None
            resp.failure(f"HTTP {resp.status_code} {_error_code(doc)}")
            if resp.status_code in (429, 503):
                try:
                    retry_after = min(float(resp.headers.get("Retry-After") or 1), 5.0)
                except ValueError:
                    retry_after = 1.0
        time.sleep(retry_after)  # gevent-patched: yields to the other users
        return None


def _check_sent(doc: dict[str, Any]) -> str | None:
    sent = doc.get("messages")
    if isinstance(sent, list) and len(sent) == BATCH:
        return None
    return f"send confirmed {len(sent) if isinstance(sent, list) else sent!r} of {BATCH}"


class Producer(CmqUser):
    """Sends batches of ``LOADTEST_BATCH`` messages at ``LOADTEST_SEND_RATE`` batches/s."""

    weight = _env_int("LOADTEST_PRODUCER_WEIGHT", 1)
    wait_time = constant_throughput(SEND_RATE)

    @task
    def send(self) -> None:
        attributes = {SENT_ATTR: f"{time.time() * 1000.0:.3f}"}
        messages = [{"body": BODY, "attributes": attributes} for _ in range(BATCH)]
        self.post_json(f"{QUEUE_PATH}/messages", {"messages": messages}, SEND_NAME, _check_sent)


class Consumer(CmqUser):
    """Long-polls, records end-to-end latency per first delivery, acks in batches."""

    weight = _env_int("LOADTEST_CONSUMER_WEIGHT", 1)
    wait_time = constant(0)  # the long poll paces an idle consumer

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.pending: list[str] = []  # receipts to ack

    def on_stop(self) -> None:
        while self.pending:
            self.ack()

    @task
    def receive(self) -> None:
        payload = {
            "max_messages": RECEIVE_MAX,
            "wait_seconds": WAIT_SECONDS,
            "visibility_timeout": VISIBILITY_TIMEOUT,
        }
        doc = self.post_json(f"{QUEUE_PATH}/messages/receive", payload, "receive")
        if doc is None:
            return
        received_ms = time.time() * 1000.0
        messages = doc.get("messages", [])
        for m in messages:
            self.pending.append(m["receipt"])
            sent = (m.get("attributes") or {}).get(SENT_ATTR)
            if sent is None:
                continue  # not one of ours
            if m.get("receive_count", 1) > 1:
                global redelivered  # noqa: PLW0603 - one counter per process, gevent-safe
                redelivered += 1
                continue
            self.environment.events.request.fire(
                request_type=E2E_TYPE,
                name=E2E_NAME,
                response_time=max(0.0, received_ms - float(sent)),
                response_length=len(m.get("body", "")),
                exception=None,
                context={},
            )
        # Ack once a batch is full, or when the queue looks drained (a short answer).
        if len(self.pending) >= ACK_BATCH or (self.pending and len(messages) < RECEIVE_MAX):
            self.ack()

    def ack(self) -> None:
        receipts, self.pending = self.pending[:MAX_ACK_BATCH], self.pending[MAX_ACK_BATCH:]
        path = f"{QUEUE_PATH}/messages/ack"
        with self.client.post(
            path, json={"receipts": receipts}, name="ack", catch_response=True
        ) as r:
            try:
                results = r.json()["results"] if r.status_code == 200 else None
            except (ValueError, KeyError, TypeError):
                results = None
            if results is None:
                r.failure(f"HTTP {r.status_code}")
                return
            failed = [x for x in results if not x.get("ok")]
            if failed:
                r.failure(f"{len(failed)}/{len(results)} not acked, e.g. {failed[0].get('error')}")


class _PlanShape(LoadTestShape):
    abstract = True

    def tick(self) -> tuple[int, float] | None:
        assert PLAN is not None
        return None if _stop_requested else shapes.target(PLAN, self.get_run_time())


class StepsShape(_PlanShape):
    """``LOADTEST_STEPS`` users (default 10, 20, 40) in equal steps over ``LOADTEST_SECONDS``."""

    abstract = SHAPE != "steps"


class SoakShape(_PlanShape):
    """``LOADTEST_USERS`` users (default 20) for ``LOADTEST_SECONDS``."""

    abstract = SHAPE != "soak"


# -- queue set-up and tear-down (not recorded as requests) ----------------------------------------
def _admin(environment: Environment, action: str, patience_s: float) -> None:
    """Create (``"create"``) or delete (``"delete"``) the queue with `cmq.client`, which tries
    every node; temporary failures are retried for ``patience_s`` (at least one attempt).
    Raises ``RuntimeError`` with the last error when it did not succeed."""
    urls = URLS or parse_urls(environment.host) or [DEFAULT_URL]
    deadline = time.monotonic() + patience_s
    with SyncClient(urls, timeout=5) as client:
        while True:
            try:
                if action == "create":
                    client.create_queue(QUEUE, {"visibility_timeout": VISIBILITY_TIMEOUT})
                else:
                    client.delete_queue(QUEUE)
                return
            except (TransportError, ServerError) as e:
                retriable = not isinstance(e, ServerError) or e.status >= 500 or e.status == 429
                if not retriable or time.monotonic() > deadline:
                    raise RuntimeError(f"{action} queue {QUEUE!r} on {urls}: {e}") from e
            time.sleep(0.5)


@events.test_start.add_listener
def _create_queue(environment: Environment, **_kw: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    _admin(environment, "create", patience_s=30)
    log.info("queue %s ready", QUEUE)


@events.test_stop.add_listener
def _delete_queue(environment: Environment, **_kw: Any) -> None:
    if isinstance(environment.runner, WorkerRunner) or QUEUE_FROM_ENV:
        return
    try:
        _admin(environment, "delete", patience_s=0)  # never hold up the end of a run
    except RuntimeError as e:
        log.warning("could not delete queue %s: %s", QUEUE, e)


# -- figures per stage (user count) and SLO gates -------------------------------------------------
def _request_stop(signum: int) -> None:
    global _stop_requested  # noqa: PLW0603 - read by the shape's tick
    if _stop_requested:
        log.warning("second %s: exiting now, without a verdict", signal.Signals(signum).name)
        os._exit(128 + signum)
    _stop_requested = True
    log.warning(
        "%s: ending the run; the summary and SLO verdict follow", signal.Signals(signum).name
    )


@events.init.add_listener
def _on_init(environment: Environment, **_kw: Any) -> None:
    global _environment  # noqa: PLW0603 - the request event does not carry it
    _environment = environment
    # With a shape, headless Locust installs its SIGTERM handler only after the shape has ended
    # (SIGTERM kills it without a report) and a Ctrl-C can hang it: end the shape instead.
    if PLAN is not None and not isinstance(environment.runner, WorkerRunner):
        gevent.signal_handler(signal.SIGTERM, _request_stop, signal.SIGTERM)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            gevent.signal_handler(signal.SIGINT, _request_stop, signal.SIGINT)


@events.request.add_listener
def _by_stage(
    request_type: str, name: str, response_time: float, exception: Any, **_kw: Any
) -> None:
    runner = _environment.runner if _environment else None
    if runner is None or isinstance(runner, WorkerRunner):
        return
    users = runner.target_user_count
    if users == 0:
        return  # stopping: the users' last acks
    now = time.time()
    stage = stages.get(users)
    if stage is None:
        stage = stages[users] = slo.Stage(users=users, first_s=now, last_s=now)
    stage.last_s = now
    failed = exception is not None
    if request_type == E2E_TYPE:
        stage.e2e.add(response_time, failed)
        return
    stage.http.add(response_time, failed)
    if name == SEND_NAME:
        stage.send.add(response_time, failed)


# -- SLO gates ------------------------------------------------------------------------------------
def observe(environment: Environment) -> slo.Observed:
    """The run's figures from Locust's statistics (E2E events are not HTTP requests)."""
    entries = environment.stats.entries
    http = [e for (_name, method), e in entries.items() if method != E2E_TYPE]
    send = entries.get((SEND_NAME, "POST"))
    e2e = entries.get((E2E_NAME, E2E_TYPE))
    return slo.Observed(
        requests=sum(e.num_requests for e in http),
        failures=sum(e.num_failures for e in http),
        send_count=send.num_requests if send else 0,
        send_p99_ms=float(send.get_response_time_percentile(0.99)) if send else None,
        e2e_count=e2e.num_requests if e2e else 0,
        e2e_p99_ms=float(e2e.get_response_time_percentile(0.99)) if e2e else None,
    )


@events.quitting.add_listener
def _gate(environment: Environment, **_kw: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    observed = observe(environment)
    breaches = slo.evaluate(SLO, observed)
    exceptions = len(environment.runner.exceptions) if environment.runner else 0
    if exceptions:
        breaches.append(f"{exceptions} distinct exception(s) raised in the users (see the report)")
    summary = slo.report(SLO, observed, breaches)
    summary["queue"] = QUEUE
    summary["redelivered"] = redelivered
    rows = [stages[u].summary(BATCH) for u in sorted(stages)]
    summary["stages"] = rows
    if path := os.environ.get("LOADTEST_SLO_REPORT"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"SLO: failure ratio <= {SLO.max_failure_ratio:g}, send p99 <= {SLO.send_p99_ms:g} ms, "
        f"e2e p99 <= {SLO.e2e_p99_ms:g} ms"
    )
    print(f"observed: {observed}; redelivered {redelivered}")
    print(f"per stage ({BATCH} messages of {len(BODY)} bytes per send):")
    print(slo.stage_table(rows))
    for line in breaches:
        print(f"SLO FAILED: {line}")
    print("SLO: all passed" if not breaches else f"SLO: {len(breaches)} failed (exit code 1)")
    environment.process_exit_code = 1 if breaches else 0
