"""The budget stage releases the answer a certain retry replaces through the call's wire, and
when the wire says the deadline cut that release, ends the call and refunds the token."""

from __future__ import annotations

from typing import Any

import requests

from resilient_session import DeadlineExceeded
from resilient_session._pipeline.attempt import Attempt, Decision, Outcome, Reason, Verdict
from resilient_session._pipeline.stages.budget import spend_budget
from resilient_session._state.breaker import BreakerState

_RETRY = Decision(Verdict.RETRY, Reason.TRANSIENT, 0.25)


class ReleasingWire:
    """A wire whose release of an answer returns *cut*, and which records each release."""

    def __init__(self, cut: Exception | None) -> None:
        self.cut = cut
        self.released: list[tuple[Any, float | None, Any]] = []

    def release(self, answer: Any, deadline_at: float | None, runtime: Any) -> Exception | None:
        self.released.append((answer, deadline_at, runtime))
        return self.cut


def _retried(harness, wire: ReleasingWire) -> tuple[Attempt, Any, requests.Response]:
    h = harness()
    first = h.first_attempt(deadline=2.0)
    call = first.call.replace(wire=wire)
    answer = requests.Response()
    answer.status_code = 503
    return Attempt.first(call), h.host().bucket, answer


def test_a_retry_releases_the_answer_it_replaces_through_the_wire(harness, clock):
    """A certain retry hands its 503 to the call's wire with the call's deadline and runtime,
    stays a retry, and spends one token."""
    wire = ReleasingWire(None)
    attempt, bucket, answer = _retried(harness, wire)
    full = bucket.snapshot().tokens
    retried = Outcome(answer, None, _RETRY, None, BreakerState.CLOSED)

    outcome = spend_budget(attempt, lambda _: retried)

    assert outcome is retried
    call = attempt.call
    assert wire.released == [(answer, call.deadline_at, call.runtime)]
    assert call.deadline_at == clock.monotonic() + 2.0
    snapshot = bucket.snapshot()
    assert (snapshot.tokens, snapshot.retries) == (full - 1.0, 1)


def test_a_release_the_deadline_cut_ends_the_call_and_refunds_the_token(harness):
    """The wire's cut becomes the outcome's error beside the answer, decided give_up/deadline
    with the breaker state kept; the token withdrawn for the retry is given back."""
    cut = DeadlineExceeded("deadline ran out while reading the body of 503")
    wire = ReleasingWire(cut)
    attempt, bucket, answer = _retried(harness, wire)
    full = bucket.snapshot().tokens

    outcome = spend_budget(
        attempt, lambda _: Outcome(answer, None, _RETRY, None, BreakerState.HALF_OPEN)
    )

    assert outcome._asdict() == {
        "response": answer,
        "error": cut,
        "decision": Decision(Verdict.GIVE_UP, Reason.DEADLINE),
        "refused": None,
        "breaker": BreakerState.HALF_OPEN,
        "fallback": None,
    }
    snapshot = bucket.snapshot()
    assert (snapshot.tokens, snapshot.retries) == (full, 0)
    assert len(wire.released) == 1
