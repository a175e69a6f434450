"""The decide stage: the tier of each outcome, the wait before a retry, and whether it fits."""

from __future__ import annotations

import math

from resilient_session._pipeline.attempt import (
    ANSWERED,
    Attempt,
    Decision,
    Outcome,
    Reason,
    Verdict,
)
from resilient_session._pipeline.backoff import full_jitter, overload_backoff, parse_retry_after
from resilient_session._pipeline.classify import meaning_of
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.intent import caller_retries
from resilient_session._pipeline.wire import ErrorKind
from resilient_session._state.breaker import BreakerState
from resilient_session._state.try_table import Tier
from resilient_session.clock import Clock

_CALLER_RETRIES = Decision(Verdict.GIVE_UP, Reason.CALLER_RETRIES)


def _give_up(reason: Reason) -> Decision:
    return Decision(Verdict.GIVE_UP, reason)


def decide_tries(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Decides each try; the give-up reasons are checked in the order the contract fixes."""
    outcome = call_next(attempt)
    response = outcome.response
    # hot path: happy
    if response is not None and response.status_code < 400 and outcome.error is None:
        # hot path: answered
        return outcome if outcome.decision is ANSWERED else outcome.with_decision(ANSWERED)
    return decided(attempt, outcome)


def decided(attempt: Attempt, outcome: Outcome) -> Outcome:
    """*outcome*, of a try that did not end well, with its decision."""
    decision = decide(attempt, outcome)
    error = outcome.error
    if (
        decision.verdict is not Verdict.RETRY
        and attempt.last_real is not None
        and error is not None
        and attempt.call.wire.error_kind(error) is ErrorKind.CONNECT
    ):
        # Like a try refused locally, a retry that could not even connect never reached
        # the upstream: the caller gets what the last try that did reach it got.
        return outcome._replace(decision=decision, fallback=attempt.last_real)
    return outcome.with_decision(decision)


def decide(attempt: Attempt, outcome: Outcome) -> Decision:
    """What follows *outcome*: the wait drawn from the call's random source, and measured
    against its deadline on the call's clock."""
    if outcome.refused is not None:
        return Decision(Verdict.FAIL_FAST, outcome.refused)
    call = attempt.call
    policy = call.policy.retry
    error = outcome.error
    kind = None if error is None else call.wire.error_kind(error)
    tier = meaning_of(outcome, call).tier
    if tier is Tier.SUCCESS:
        return ANSWERED
    if tier is Tier.NEVER:
        return _give_up(Reason.NOT_RETRYABLE)
    if not call.idempotent and kind is not ErrorKind.CONNECT:
        return _give_up(Reason.NOT_IDEMPOTENT)
    if not call.replayable:
        return _give_up(Reason.BODY_NOT_REPLAYABLE)
    if attempt.number >= policy.max_attempts:
        return _give_up(Reason.MAX_ATTEMPTS)
    runtime = call.runtime
    clock, rng = runtime.clock, runtime.rng
    if tier is Tier.OVERLOAD:
        reason = Reason.OVERLOAD
        asked = _retry_after(outcome, clock)
        # An infinite delay is too long even under an infinite cap: it could never be slept.
        if asked is not None and (asked > policy.retry_after_cap or asked == math.inf):
            return _give_up(Reason.RETRY_AFTER_TOO_LONG)
        wait = (
            asked
            if asked is not None
            else overload_backoff(attempt.number, policy.backoff_base, policy.backoff_cap, rng)
        )
    else:
        reason = Reason.TRANSIENT
        wait = full_jitter(attempt.number, policy.backoff_base, policy.backoff_cap, rng)
    if outcome.breaker is BreakerState.OPEN:
        return _give_up(Reason.BREAKER_OPEN)
    if kind is ErrorKind.DEADLINE_CUT:
        return _give_up(Reason.DEADLINE)
    if call.deadline_at is not None and clock.monotonic() + wait >= call.deadline_at:
        return _give_up(Reason.DEADLINE)
    if caller_retries():
        # The request being served will be tried again by its caller, which repeats this
        # call too: a retry here as well would multiply the tries below.
        return _CALLER_RETRIES
    return Decision(Verdict.RETRY, reason, wait)


def _retry_after(outcome: Outcome, clock: Clock) -> float | None:
    # RFC 9110 §10.2.3; honoured only on the overload statuses, ignored elsewhere.
    response = outcome.response
    if response is None:
        return None
    return parse_retry_after(response.headers.get("Retry-After"), clock.wall())
