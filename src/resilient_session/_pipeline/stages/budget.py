"""The budget stage: first tries fill the host's bucket, each retry needs a token from it."""

from __future__ import annotations

from resilient_session._pipeline.attempt import Attempt, Decision, Outcome, Reason, Verdict
from resilient_session._pipeline.drive import Next

_BUDGET_EXHAUSTED = Decision(Verdict.GIVE_UP, Reason.BUDGET_EXHAUSTED)
_DEADLINE = Decision(Verdict.GIVE_UP, Reason.DEADLINE)
_RETRY = Verdict.RETRY  # hot path: module-constants


def spend_budget(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Turn a planned retry into a give-up when the host's retry budget is spent.

    It sits outside the decide stage, so budget_exhausted is the last reason checked and a
    token is withdrawn only for a retry that will really happen. Only here is a retry certain,
    so only here is the answer it replaces released (``Wire.release``): a streamed body is
    drained only when the call will not end with it.
    """
    bucket = attempt.call.state.bucket
    if attempt.number == 1:
        bucket.deposit()
    outcome = call_next(attempt)
    if outcome.decision.verdict is not _RETRY:
        return outcome
    if not bucket.try_withdraw():
        return outcome.with_decision(_BUDGET_EXHAUSTED)
    answer = outcome.response
    if answer is not None:
        call = attempt.call
        cut = call.wire.release(answer, call.deadline_at, call.runtime)
        if cut is not None:
            # The body outlasted the deadline: no retry after all, and no token spent.
            bucket.refund()
            return Outcome(answer, cut, _DEADLINE, breaker=outcome.breaker)
    return outcome
