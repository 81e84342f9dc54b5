"""`cmq.archive.pacing`: the back-off and the decisions of ``cmq archive --follow`` (pure)."""

from __future__ import annotations

import pytest

from cmq.archive.pacing import Action, Backoff, Outcome, Policy, State, decide, stopped

POLICY = Policy(8, idle=Backoff(1.0, 30.0, jitter=0.2), failure=Backoff(2.0, 60.0, jitter=0.2))


def test_the_backoff_doubles_up_to_its_cap_and_jitter_only_shortens() -> None:
    b = Backoff(1.0, 30.0, jitter=0.2)
    assert [b.delay(n, 0.0) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert b.delay(10_000, 0.0) == 30.0  # no overflow far along
    assert b.delay(3, 0.5) == pytest.approx(4 * 0.9)
    for n in range(1, 12):
        for r in (0.0, 0.3, 0.999):
            d = b.delay(n, r)
            assert 0.8 * min(30.0, 2 ** (n - 1)) - 1e-9 <= d <= 30.0


@pytest.mark.parametrize(
    ("base", "cap", "jitter"), [(0.0, 1.0, 0.1), (2.0, 1.0, 0.1), (1.0, 2.0, 1.0), (1, 2, -0.1)]
)
def test_a_malformed_backoff_is_refused(base: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="bad back-off"):
        Backoff(base, cap, jitter)


def test_idle_batches_back_off_and_work_resets() -> None:
    state = State()
    waits = []
    for _ in range(7):
        d = decide(POLICY, state, Outcome(), 0.0)
        assert d.action is Action.WAIT
        waits.append(d.wait)
        state = d.state
    assert waits == [1, 2, 4, 8, 16, 30, 30]
    assert state == State(batches=7, idle_streak=7, failure_streak=0)
    # Work appears, a partial batch: the streak resets, the next batch after the first step.
    d = decide(POLICY, state, Outcome(segments=3), 0.0)
    assert (d.action, d.wait, d.state) == (Action.WAIT, 1.0, State(8, 0, 0))
    # Idle again: back to the first step, not to where it was.
    assert decide(POLICY, d.state, Outcome(), 0.0).wait == 1.0


def test_a_full_batch_runs_the_next_at_once() -> None:
    d = decide(POLICY, State(3, 5, 0), Outcome(segments=8), 0.7)
    assert (d.action, d.wait, d.state) == (Action.RUN, 0.0, State(4, 0, 0))
    # Recovering earlier batches' segments is work too.
    assert decide(POLICY, State(0, 4, 0), Outcome(recovered=2), 0.0).state.idle_streak == 0


def test_transient_failures_back_off_on_their_own_scale_and_are_retried() -> None:
    state = State(0, 2, 0)
    waits = []
    for _ in range(7):
        d = decide(POLICY, state, Outcome(code="cluster_unavailable"), 0.0)
        assert d.action is Action.WAIT
        waits.append(d.wait)
        state = d.state
    assert waits == [2, 4, 8, 16, 32, 60, 60]
    assert state.failure_streak == 7 and state.idle_streak == 2
    # A success resets the failure streak.
    assert decide(POLICY, state, Outcome(), 0.0).state.failure_streak == 0
    for code, status in (
        ("write_failed", None),
        ("conflicting_claim", None),
        ("api_error", 404),
        ("api_error", 503),
        ("unexpected", None),
    ):
        assert decide(POLICY, State(), Outcome(code=code, status=status), 0.0).action is (
            Action.WAIT
        ), code


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("invalid_argument", None),
        ("manifest_newer", None),
        ("duplicate_segment", None),
        ("spark_lost", None),
        ("api_error", 400),
        ("api_error", 401),
        ("api_error", 403),
    ],
)
def test_a_permanent_failure_stops_with_status_1(code: str, status: int | None) -> None:
    d = decide(POLICY, State(4, 0, 0), Outcome(code=code, status=status), 0.0)
    assert (d.action, d.exit_status, d.state.batches) == (Action.STOP, 1, 5)


def test_a_stop_request_exits_0() -> None:
    d = stopped()
    assert (d.action, d.exit_status) == (Action.STOP, 0)
