"""The breaker stage: the host's breaker admits or refuses each try and records its result."""

from __future__ import annotations

from resilient_session._pipeline.attempt import Attempt, Outcome, Reason
from resilient_session._pipeline.classify import meaning_of
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.refusal import refuse
from resilient_session._state.breaker import (
    BreakerState,
    CircuitBreaker,
    Permit,
    Transition,
    TryResult,
)

# The breaker counts this refusal from inside; the throttle and the limit count their own.
_DEADLINE_SPENT = Reason.DEADLINE_SPENT
# hot path: module-constants
_CLOSED = BreakerState.CLOSED
_SUCCESS = TryResult.SUCCESS


def guard_with_breaker(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Fail fast while the host's breaker is open; otherwise send and count the result."""
    breaker = attempt.call.state.breaker
    heed = breaker.heed
    if heed is not None:
        heed()
    # hot path: closed-admission
    permit, opened_to_probe = breaker.closed_admission or breaker.allow()
    if opened_to_probe is not None:
        report(attempt, opened_to_probe)
    if permit is None:
        return breaker_refusal(attempt, breaker)
    try:
        outcome = call_next(attempt)
    except BaseException:
        # Recorded even then, so a half-open probe slot is never leaked.
        breaker.record(permit, TryResult.NEUTRAL)
        raise
    response = outcome.response
    # hot path: happy
    if response is not None and response.status_code < 400 and outcome.error is None:
        state, transition = breaker.record(permit, _SUCCESS)
        if transition is not None:
            return settled(attempt, outcome, state, transition)
        # hot path: answered
        return outcome if outcome.breaker is state else outcome.with_breaker(state)
    return recorded(attempt, outcome, breaker, permit)


def breaker_refusal(attempt: Attempt, breaker: CircuitBreaker) -> Outcome:
    """The refusal of a try *breaker*, open or out of probe slots, did not admit."""
    return refuse(
        attempt,
        Reason.BREAKER_OPEN,
        f"circuit breaker for {breaker.host}{_of_route(breaker.route)} is open; "
        "the call was not sent",
    ).with_breaker(BreakerState.OPEN)


def recorded(
    attempt: Attempt, outcome: Outcome, breaker: CircuitBreaker, permit: Permit
) -> Outcome:
    """*outcome*, of a try *breaker* admitted with *permit* that did not end well, counted
    and stamped with the breaker's state after it."""
    refused = outcome.refused
    state, transition = breaker.record(
        permit, try_result(attempt, outcome), refused is None, refused is _DEADLINE_SPENT
    )
    return settled(attempt, outcome, state, transition)


def settled(
    attempt: Attempt, outcome: Outcome, state: BreakerState, transition: Transition | None
) -> Outcome:
    """*outcome* stamped with the breaker's *state*, its *transition* (if any) acted on: the
    throttle's window emptied by a close, and the change reported."""
    if transition is not None:
        if transition.to_state is _CLOSED:
            reset_throttle(attempt)
        report(attempt, transition)
    return outcome if outcome.breaker is state else outcome.with_breaker(state)


def report(attempt: Attempt, transition: Transition) -> None:
    """The ``breaker.transition`` event, then each hook that watches state changes."""
    attempt.call.runtime.states.transition(transition)


def reset_throttle(attempt: Attempt) -> None:
    """Start the host's throttle window afresh: a probe just proved the host healthy, and the
    failures that opened the breaker must not go on refusing tries it would now answer."""
    throttle = attempt.call.state.throttle
    if throttle is not None:
        throttle.reset()


def try_result(attempt: Attempt, outcome: Outcome) -> TryResult:
    """What a try says about the host's health: its row of the host's table (state.meaning).

    Failures are transport errors, timeouts of the host's own and 5xx. Any other answer
    proves the host alive, 429 included: a throttling host said when to come back. A try
    refused locally, failed for a reason of ours (TLS, a bad URL), or cut short by the caller's
    deadline says nothing either way: one impatient caller says nothing about the host.
    """
    return meaning_of(outcome, attempt.call).breaker


def _of_route(route: str | None) -> str:
    return "" if route is None else f" (route {route})"
