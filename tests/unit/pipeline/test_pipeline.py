"""The pipeline shape: list order is nesting order, and drive() is the only loop."""

from __future__ import annotations

import pytest
import requests

from resilient_session._pipeline.attempt import Attempt, Decision, Outcome, Reason, Verdict
from resilient_session._pipeline.drive import compose, drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session.testing import ScriptedTransport


def recorder(name: str, trail: list[str]):
    def middleware(attempt: Attempt, call_next):
        trail.append(f"{name}>")
        outcome = call_next(attempt)
        trail.append(f"<{name}")
        return outcome

    return middleware


def test_first_middleware_is_outermost(harness, clock):
    """compose([a, b]) runs a around b around the transport."""
    trail: list[str] = []
    transport = ScriptedTransport(clock, 200)
    chain = compose([recorder("a", trail), recorder("b", trail)], transport)
    chain(harness().first_attempt())
    assert trail == ["a>", "b>", "<b", "<a"]


def test_drive_sleeps_the_decided_wait_and_counts_attempts(harness, clock):
    """drive() repeats while the verdict is retry, sleeping each wait, numbering attempts."""
    transport = ScriptedTransport(clock, 503, 503, 200)

    def decide(attempt: Attempt, call_next):
        outcome = call_next(attempt)
        if outcome.status == 503:
            return outcome.with_decision(
                Decision(Verdict.RETRY, Reason.OVERLOAD, 0.25 * attempt.number)
            )
        return outcome

    outcome = drive(compose([decide], transport), harness().first_attempt(), clock)
    assert outcome.status == 200
    assert clock.sleeps == [0.25, 0.5]
    assert [attempt.number for attempt in transport.sent] == [1, 2, 3]


def test_default_verdict_is_terminal(harness, clock):
    """A chain with no decide stage never loops."""
    transport = ScriptedTransport(clock, 503, 200)
    outcome = drive(compose([], transport), harness().first_attempt(), clock)
    assert (outcome.status, transport.calls) == (503, 1)


def test_retried_response_is_closed(harness, clock):
    """A response that is retried is closed before the wait; the final one is left open."""
    closed: list[int] = []
    scripted = ScriptedTransport(clock, 503, 200)

    def transport(attempt: Attempt) -> Outcome:
        outcome = scripted(attempt)
        assert outcome.response is not None
        original = outcome.response.close

        def recording_close() -> None:
            closed.append(attempt.number)
            original()

        outcome.response.close = recording_close  # type: ignore[method-assign]
        return outcome

    h = harness()
    outcome = drive(standard_chain(transport, clock=clock, rng=h.rng), h.first_attempt(), clock)
    assert (outcome.status, closed) == (200, [1])


def test_unwrap_reraises_the_same_exception_object(harness, clock):
    """Errors travel as values and come back out as the very object raised."""
    error = requests.exceptions.SSLError("bad certificate")
    with pytest.raises(requests.exceptions.SSLError) as raised:
        Outcome(error=error).unwrap()
    assert raised.value is error
