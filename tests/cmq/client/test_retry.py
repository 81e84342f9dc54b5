"""The retry rules of `cmq.client.retry`, on their own (pure)."""

from __future__ import annotations

import pytest

from cmq.client.errors import ConnectFailed, ResponseLost, server_error
from cmq.client.retry import Failure, RetryPolicy, Safety, classify_answer, failure_of
from cmq.errors import CmqError, OutcomeUnknown, Overloaded, QueueNotFound


@pytest.mark.parametrize(
    ("status", "code", "failure"),
    [
        (503, "Overloaded", Failure.REFUSED),
        (503, "Unavailable", Failure.REFUSED),
        (429, "TooManyRequests", Failure.REFUSED),
        (503, "OutcomeUnknown", Failure.UNKNOWN),
        (502, "HttpError", Failure.UNKNOWN),
        (500, "InternalError", Failure.DEFINITE),
        (404, "QueueNotFound", Failure.DEFINITE),
        (400, "InvalidParameter", Failure.DEFINITE),
    ],
)
def test_answers_are_classified(status: int, code: str, failure: Failure) -> None:
    assert classify_answer(status, code) is failure
    assert failure_of(server_error(status, code, "m")) is failure


def test_transport_failures() -> None:
    assert failure_of(ConnectFailed("connect: refused", "u", "ClientConnectorError")) is (
        Failure.NOT_SENT
    )
    assert failure_of(ResponseLost("timeout", "u", "timeout")) is Failure.UNKNOWN
    assert failure_of(CmqError("client side")) is Failure.DEFINITE


def test_one_shot_calls_are_never_retried_after_an_unknown_outcome() -> None:
    p = RetryPolicy(attempts=3)
    for failure in (Failure.NOT_SENT, Failure.REFUSED):
        assert p.should_retry(failure, Safety.ONCE, 1) and p.should_retry(failure, Safety.ONCE, 2)
        assert not p.should_retry(failure, Safety.ONCE, 3)  # attempts used up
    assert not p.should_retry(Failure.UNKNOWN, Safety.ONCE, 1)
    assert p.should_retry(Failure.UNKNOWN, Safety.IDEMPOTENT, 1)
    assert not p.should_retry(Failure.DEFINITE, Safety.IDEMPOTENT, 1)


def test_delays_honour_retry_after_and_go_to_an_untried_node_at_once() -> None:
    p = RetryPolicy(attempts=5, base_delay=0.1, max_delay=1.0)
    assert p.delay(Failure.NOT_SENT, 1, None, untried_nodes=True, jitter=0.5) == 0.0
    assert p.delay(Failure.NOT_SENT, 1, None, untried_nodes=False, jitter=0.0) == 0.1
    assert p.delay(Failure.REFUSED, 3, None, untried_nodes=True, jitter=0.0) == pytest.approx(0.4)
    assert p.delay(Failure.REFUSED, 1, 5.0, untried_nodes=True, jitter=0.0) == 1.0  # capped
    assert p.delay(Failure.REFUSED, 1, 0.8, untried_nodes=True, jitter=1.0) == pytest.approx(0.4)


def test_server_errors_are_the_queue_errors() -> None:
    e = server_error(404, "QueueNotFound", "queue 'x' does not exist")
    assert isinstance(e, QueueNotFound) and e.status == 404 and e.code == "QueueNotFound"
    assert type(server_error(404, "QueueNotFound", "")) is type(e)  # one class per code
    assert isinstance(server_error(503, "OutcomeUnknown", "m"), OutcomeUnknown)
    busy = server_error(503, "Overloaded", "m", retry_after=2.0)
    assert isinstance(busy, Overloaded) and busy.retry_after == 2.0
    other = server_error(418, "Teapot", "")
    assert type(other).__name__ == "ServerError" and other.code == "Teapot"
    assert other.message == "Teapot"
