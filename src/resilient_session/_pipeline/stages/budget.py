"""The budget stage: first tries fill the host's bucket, each retry needs a token from it."""

from __future__ import annotations

from resilient_session._observe.redact import SENSITIVE_PARAMS
from resilient_session._pipeline.attempt import Attempt, Decision, Outcome, Reason, Verdict
from resilient_session._pipeline.drive import Next
from resilient_session._transport.body import drain
from resilient_session.clock import Clock
from resilient_session.errors import DeadlineExceeded

_BUDGET_EXHAUSTED = Decision(Verdict.GIVE_UP, Reason.BUDGET_EXHAUSTED)
_DEADLINE = Decision(Verdict.GIVE_UP, Reason.DEADLINE)
_RETRY = Verdict.RETRY  # a module constant, cheaper per try than the Enum class lookup


class SpendBudget:
    """Turn a planned retry into a give-up when the host's retry budget is spent.

    It sits outside the decide stage, so budget_exhausted is the last reason checked and a
    token is withdrawn only for a retry that will really happen. Only here is a retry certain,
    so only here is the response it replaces released: a streamed body is drained (up to
    ``body.DRAIN_LIMIT``) only when the call will not end with it.
    """

    def __init__(self, clock: Clock, redact: frozenset[str] = SENSITIVE_PARAMS) -> None:
        self._clock = clock
        self._redact = redact

    def __call__(self, attempt: Attempt, call_next: Next, /) -> Outcome:
        bucket = attempt.call.state.bucket
        if attempt.number == 1:
            bucket.deposit()
        outcome = call_next(attempt)
        if outcome.decision.verdict is not _RETRY:
            return outcome
        if not bucket.try_withdraw():
            return outcome.with_decision(_BUDGET_EXHAUSTED)
        response = outcome.response
        if response is not None:
            try:
                drain(response, attempt.call.deadline_at, self._clock, self._redact)
            except DeadlineExceeded as cut:
                # The body outlasted the deadline: no retry after all, and no token spent.
                bucket.refund()
                return Outcome(response, cut, _DEADLINE, breaker=outcome.breaker)
        return outcome
