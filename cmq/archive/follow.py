"""``cmq archive --follow``: batches run one after another in one warm Spark session.

Each batch is an ordinary `ArchiveJob` run (a new batch id, recovery, garbage collection,
claims, write, manifest, MarkArchived), bounded by ``max_segments``. What follows a batch (run
the next at once, back off, stop) is decided by `cmq.archive.pacing`; this module is the loop,
the signals and the output:

- One line per batch on stdout: the batch's summary on one line and when the next runs; with
  ``--json`` one JSON object per line (the summary's fields, ``"ok": true`` and ``next_in``
  seconds; a failed batch ``"ok": false``, ``code``, ``message``, ``next_in``).
- A failed batch is also logged on stderr as ``error: <code>: <message>``; a transient failure
  is retried after a back-off, a permanent one (`pacing.PERMANENT_CODES`) ends the loop with
  exit status 1. If the Spark session died under a batch (the JVM gone), the loop stops with
  ``spark_lost`` (status 1): a supervisor restarts the process with a fresh JVM.
- **Stopping.** The first SIGTERM or SIGINT lets the batch in flight finish (it is bounded by
  ``max_segments``), then the loop exits 0; a signal during a wait exits at once. A second
  signal exits the process immediately (status 128 + the signal), as a crash would: the
  batch in flight is then left to recovery (a later run removes its output if it had no
  manifest yet, or marks its segments archived if it had). Exactly-once holds either way
  (`cmq.archive.job`'s crash points cover both).

PySpark installs its own SIGINT handler when a session starts; the loop installs its handlers
again after the session is created, so they stay in force.
"""

from __future__ import annotations

import random
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

import msgspec

from cmq.archive.errors import ApiError, ArchiveError, SparkLost, UnexpectedFailure
from cmq.archive.job import ArchiveJob, JobConfig, Summary
from cmq.archive.pacing import Action, Backoff, Decision, Outcome, Policy, State, decide

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MAX_SEGMENTS = 32
"""Segments per batch under ``--follow`` unless ``--max-segments`` says otherwise: at the
default 64 MiB segments at most 2 GiB a batch, a few minutes of Spark, well inside the claim
TTL (10 minutes)."""
DEFAULT_IDLE_BACKOFF_MAX = 30.0


class StopFlag:
    """SIGTERM/SIGINT handling (see the module docstring): ``event`` is set by the first signal;
    the second ends the process at once with status 128 + the signal."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        """Install the handlers (main thread only; a no-op elsewhere, e.g. in tests)."""
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            import os

            sys.stderr.write(f"stopping now (signal {signum}): the batch is left to recovery\n")
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(128 + signum)
        sys.stderr.write(f"stopping after the batch in flight (signal {signum})\n")
        sys.stderr.flush()
        self.event.set()


def line(summary: Summary, decision: Decision, as_json: bool) -> str:
    """A successful batch's one line."""
    if as_json:
        fields: dict[str, Any] = msgspec.to_builtins(summary)
        return msgspec.json.encode({**fields, "ok": True, "next_in": _next_in(decision)}).decode()
    text = summary.render().splitlines()[0]
    extra = [
        f"recovered {summary.recovered}" if summary.recovered else "",
        f"skipped {summary.skipped}" if summary.skipped else "",
        f"{summary.spark_seconds:.1f} s starting Spark" if summary.spark_seconds else "",
    ]
    return "; ".join([text, *(e for e in extra if e), _next_text(decision)])


def failure_line(code: str, message: str, decision: Decision, as_json: bool) -> str:
    """A failed batch's one line."""
    if as_json:
        got = {"ok": False, "code": code, "message": message, "next_in": _next_in(decision)}
        return msgspec.json.encode(got).decode()
    return f"batch failed: {code}; {_next_text(decision)}"


def _next_in(decision: Decision) -> float | None:
    if decision.action is Action.STOP:
        return None
    return round(decision.wait, 3)


def _next_text(decision: Decision) -> str:
    if decision.action is Action.STOP:
        return f"stopping (exit {decision.exit_status})"
    if decision.action is Action.RUN:
        return "next batch at once"
    return f"next batch in {decision.wait:.1f} s"


@dataclass(slots=True)
class Follower:
    """The loop. ``run_batch`` runs one batch; ``stop`` is the stop request; ``out`` and
    ``err`` print a line; ``draw`` gives the jitter's random numbers in [0, 1)."""

    run_batch: Callable[[], Summary]
    policy: Policy
    stop: threading.Event
    as_json: bool = False
    out: Callable[[str], None] = lambda s: print(s, flush=True)
    err: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)
    draw: Callable[[], float] = random.random
    state: State = field(default_factory=State)

    def run(self) -> int:
        """Batches until a stop request (0) or a permanent failure (1): the exit status."""
        while not self.stop.is_set():
            summary: Summary | None = None
            try:
                summary = self.run_batch()
                outcome = Outcome(summary.segments, summary.recovered)
            except ArchiveError as e:
                status = e.status if isinstance(e, ApiError) else None
                outcome, message = Outcome(code=e.code, status=status), e.message
            decision = decide(self.policy, self.state, outcome, self.draw())
            self.state = decision.state
            if summary is not None:
                self.out(line(summary, decision, self.as_json))
            else:
                assert outcome.code is not None
                self.err(f"error: {outcome.code}: {message}")
                self.out(failure_line(outcome.code, message, decision, self.as_json))
            if decision.action is Action.STOP:
                return decision.exit_status
            if decision.action is Action.WAIT and self.stop.wait(decision.wait):
                break
        self.err(f"stopped after {self.state.batches} batches")
        return 0


def spark_alive(session: SparkSession) -> bool:
    """Whether ``session``'s JVM still answers and its context is not stopped."""
    try:
        jsc = getattr(session.sparkContext, "_jsc", None)
        return jsc is not None and not bool(jsc.sc().isStopped())
    except Exception:
        return False


def follow_main(
    config: JobConfig,
    make_session: Callable[[], SparkSession],
    idle_backoff_max: float,
    as_json: bool,
) -> int:
    """``cmq archive --follow`` with ``config`` (its ``max_segments`` set): the exit status."""
    stop = StopFlag()
    stop.install()
    sessions: list[SparkSession] = []

    def spark() -> SparkSession:
        if not sessions:
            sessions.append(make_session())
            stop.install()  # PySpark's own SIGINT handler replaced ours
        return sessions[0]

    def run_batch() -> Summary:
        try:
            return ArchiveJob(spark, config).run()
        except Exception as e:
            if sessions and not spark_alive(sessions[0]):
                raise SparkLost(f"the Spark session died under a batch: {e}") from None
            if isinstance(e, ArchiveError):
                raise
            # Anything else is not one of ours: a bug or an unforeseen failure of a
            # dependency. Retried like a transient failure, named by its type.
            raise UnexpectedFailure(f"{type(e).__name__}: {e}") from None

    assert config.max_segments is not None
    policy = Policy(
        config.max_segments,
        idle=Backoff(min(1.0, idle_backoff_max), idle_backoff_max),
    )
    try:
        return Follower(run_batch, policy, stop.event, as_json).run()
    finally:
        for s in sessions:
            if spark_alive(s):
                s.stop()
