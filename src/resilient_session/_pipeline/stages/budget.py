"""The budget stage: first tries fill the host's bucket, each retry needs a token from it."""

from __future__ import annotations

from resilient_session._pipeline.attempt import Attempt, Decision, Outcome, Reason, Verdict
from resilient_session._pipeline.drive import Next
from resilient_session._state.budget import TokenBucket

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
    return pay_for_retry(attempt, outcome, bucket)


def pay_for_retry(attempt: Attempt, outcome: Outcome, bucket: TokenBucket) -> Outcome:
    """*outcome*, decided a retry, as the budget lets it stand: a token withdrawn and the
    answer it replaces released, or a give-up (no token, or a body that outlasted the
    deadline)."""
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
