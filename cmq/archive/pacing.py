"""When ``cmq archive --follow`` runs its next batch, and when it stops: pure decisions, no I/O.

The loop (`cmq.archive.follow`) reports each batch's outcome to `decide` and gets back what to
do: run the next batch at once, wait, or stop with an exit status.

- **Work** (the batch archived or recovered segments): both streaks reset. A full batch
  (``segments >= max_segments``) means more is probably waiting: the next batch runs at once;
  a partial one waits the idle back-off's first step (``idle.base``).
- **Idle** (nothing released): the idle streak grows and the wait doubles from ``idle.base`` up
  to ``idle.cap``, with jitter.
- **Failed**, transient (the cluster unreachable, a claim taken over, a write that failed...):
  logged by the loop, the failure streak grows and the wait doubles from ``failure.base`` up to
  ``failure.cap``, with jitter; retried without limit (a later batch recovers or collects
  whatever the failed one left).
- **Failed**, permanent (`PERMANENT_CODES`; an API refusal of the request itself: HTTP 400,
  401, 403): stop with exit status 1. Rerunning cannot fix bad arguments, a manifest of a
  newer release, a segment in two manifests or a key the cluster refuses.
- A stop request (SIGTERM/SIGINT) is checked by the loop between batches and during waits:
  it stops with exit status 0.

Jitter only shortens a wait (``delay * (1 - jitter * r)`` for ``r`` in [0, 1)), so no wait ever
exceeds its cap and jobs started together drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

PERMANENT_CODES = frozenset(
    {"invalid_argument", "manifest_newer", "duplicate_segment", "spark_lost"}
)
"""Error codes a rerun cannot fix (`cmq.archive.errors`)."""
PERMANENT_STATUSES = frozenset({400, 401, 403})
"""HTTP statuses of an ``api_error`` that refuse the request itself (bad request, key)."""


class Action(Enum):
    RUN = "run"
    WAIT = "wait"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential back-off: ``base * 2**(streak - 1)`` seconds, at most ``cap``, shortened by
    up to ``jitter`` (a fraction) at random."""

    base: float
    cap: float
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (0 < self.base <= self.cap) or not (0 <= self.jitter < 1):
            raise ValueError(f"bad back-off: base {self.base}, cap {self.cap}, {self.jitter}")

    def delay(self, streak: int, r: float) -> float:
        """The wait after the ``streak``-th (>= 1) bad batch in a row; ``r`` in [0, 1)."""
        # 2**60 is far past any cap; bounding the exponent keeps the float finite.
        raw = min(self.cap, self.base * 2.0 ** min(max(streak, 1) - 1, 60))
        return raw * (1.0 - self.jitter * r)


@dataclass(frozen=True, slots=True)
class Policy:
    max_segments: int
    """The batch bound: a batch that archived this many ran full."""
    idle: Backoff = Backoff(1.0, 30.0)
    failure: Backoff = Backoff(2.0, 60.0)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One batch: ``segments`` archived and ``recovered`` from earlier manifests, or the
    ``code`` (and HTTP ``status`` of an ``api_error``) it failed with."""

    segments: int = 0
    recovered: int = 0
    code: str | None = None
    status: int | None = None

    @property
    def failed(self) -> bool:
        return self.code is not None

    @property
    def permanent(self) -> bool:
        return self.code in PERMANENT_CODES or (
            self.code == "api_error" and self.status in PERMANENT_STATUSES
        )


@dataclass(frozen=True, slots=True)
class State:
    batches: int = 0
    idle_streak: int = 0
    failure_streak: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    state: State
    wait: float = 0.0
    """Seconds to wait before the next batch (``WAIT`` only)."""
    exit_status: int = 0
    """The process's exit status (``STOP`` only)."""


def decide(policy: Policy, state: State, outcome: Outcome, r: float) -> Decision:
    """What follows a batch with ``outcome`` (see the module docstring); ``r`` in [0, 1) is the
    jitter's random draw."""
    batches = state.batches + 1
    if outcome.failed:
        if outcome.permanent:
            return Decision(Action.STOP, State(batches, 0, state.failure_streak + 1), exit_status=1)
        streak = state.failure_streak + 1
        nxt = State(batches, state.idle_streak, streak)
        return Decision(Action.WAIT, nxt, policy.failure.delay(streak, r))
    if outcome.segments or outcome.recovered:
        nxt = State(batches, 0, 0)
        if outcome.segments >= policy.max_segments:
            return Decision(Action.RUN, nxt)
        return Decision(Action.WAIT, nxt, policy.idle.delay(1, r))
    streak = state.idle_streak + 1
    return Decision(Action.WAIT, State(batches, streak, 0), policy.idle.delay(streak, r))


def stopped() -> Decision:
    """The decision when a stop was requested: exit 0 (checked between batches and waits)."""
    return Decision(Action.STOP, State(), exit_status=0)
