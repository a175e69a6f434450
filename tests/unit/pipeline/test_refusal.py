"""The one refused outcome: each guard's refusal, told by the call's wire, with the message the
stage wrote and the last try that reached the upstream for the caller instead."""

from __future__ import annotations

import pytest
import requests

from resilient_session import (
    CircuitOpenError,
    ConcurrencyLimitError,
    DeadlineExceeded,
    HedgeCancelled,
    ThrottledError,
)
from resilient_session._pipeline.attempt import Outcome, Reason, Verdict
from resilient_session._pipeline.refusal import refuse
from resilient_session._state.breaker import BreakerState

FAST = {"defaults": {"retry": {"backoff_base": 0.1, "backoff_cap": 1.0}}}


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (Reason.BREAKER_OPEN, CircuitOpenError),
        (Reason.THROTTLED, ThrottledError),
        (Reason.CONCURRENCY_LIMIT, ConcurrencyLimitError),
        (Reason.DEADLINE_SPENT, DeadlineExceeded),
        (Reason.HEDGE_LOST, HedgeCancelled),
    ],
)
def test_a_refusal_falls_back_on_the_last_try_that_reached_the_upstream(harness, reason, kind):
    """The refused try's error is the wire's for its reason, about the try's own request, and
    the 503 of the try before is what the caller gets."""
    attempt = harness(FAST).first_attempt()
    unavailable = requests.Response()
    unavailable.status_code = 503
    answered = Outcome(response=unavailable)
    second = attempt.next(answered)
    outcome = refuse(second, reason, f"try {second.number} refused")
    error = outcome.error
    assert type(error) is kind
    assert isinstance(error, requests.RequestException)
    assert (error.args, error.request) == (("try 2 refused",), second.request)
    assert (outcome.refused, outcome.fallback, outcome.response) == (reason, answered, None)


def test_a_first_try_refused_has_nothing_to_fall_back_on(harness):
    """Refused on its first try, a call raises the refusal itself."""
    attempt = harness(FAST).first_attempt()
    outcome = refuse(attempt, Reason.BREAKER_OPEN, "circuit breaker for x is open")
    assert outcome.fallback is None
    with pytest.raises(CircuitOpenError, match=r"^circuit breaker for x is open$"):
        outcome.unwrap()


def test_the_breakers_refusal_message_and_state(harness):
    """An open breaker's refusal names the host, says the call was not sent, and carries the
    open state out to decide, which fails fast."""
    h = harness({"defaults": {"breaker": {"failure_threshold": 1}}})
    h.run(503)
    outcome, transport = h.run(200)
    assert transport.calls == 0
    assert type(outcome.error) is CircuitOpenError
    assert str(outcome.error) == (
        "circuit breaker for http://svc.test:80 is open; the call was not sent"
    )
    assert (outcome.breaker, outcome.refused) == (BreakerState.OPEN, Reason.BREAKER_OPEN)
    assert outcome.decision.verdict is Verdict.FAIL_FAST
