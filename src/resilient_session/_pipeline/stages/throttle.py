"""The throttle stage: refuse locally the share of tries a partly failing host would fail."""

from __future__ import annotations

from resilient_session._pipeline.attempt import Attempt, Outcome, Reason
from resilient_session._pipeline.classify import meaning_of
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.refusal import refuse
from resilient_session._state.throttle import AdaptiveThrottle


def throttle_tries(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Refuse a try with the host's throttle probability; otherwise send it and count it."""
    state = attempt.call.state
    throttle = state.throttle
    if throttle is None:
        return call_next(attempt)
    # A half-open breaker admits only probes, sent on purpose to test the host: refusing one
    # would only hand its slot to the next call. Its result still counts below.
    # hot path: throttle-gate
    if throttle.may_refuse and state.breaker.closed_admission is not None:
        refusal = throttle_refusal(attempt, throttle)
        if refusal is not None:
            return refusal
    outcome = call_next(attempt)
    response = outcome.response
    # hot path: happy
    if response is not None and response.status_code < 400 and outcome.error is None:
        throttle.accepted(attempt.call.started_at)
        return outcome
    count_answer(attempt, outcome, throttle)
    return outcome


def throttle_refusal(attempt: Attempt, throttle: AdaptiveThrottle) -> Outcome | None:
    """The refusal of a try *throttle* refuses, drawn with its probability; None to send it."""
    probability = throttle.ask()
    if probability is None:
        return None
    return refuse(
        attempt,
        Reason.THROTTLED,
        f"adaptive throttle for {attempt.call.state.key} refused the try (refusal chance "
        f"{probability:.1%}: the host failed most recent tries); it was not sent",
    )


def count_answer(attempt: Attempt, outcome: Outcome, throttle: AdaptiveThrottle) -> None:
    """Count in *throttle* a try that did not end well, if it was a try of the host's."""
    accepted = meaning_of(outcome, attempt.call).accepted
    if accepted is not None:
        throttle.record(accepted)
    # No try at all (accepted None): a try an inner guard refused (the limit, the spent
    # deadline) never reached the host, one the caller's deadline cut short says only that the
    # caller was in a hurry, and a TLS or URL error is ours. Counted as tries without an
    # accept they would read as failures, and one impatient caller would throttle a healthy
    # host for every other caller of the session.
