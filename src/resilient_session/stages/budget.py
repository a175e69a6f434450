"""The budget stage: first tries fill the host's bucket, each retry needs a token from it."""

from __future__ import annotations

from resilient_session.attempt import Attempt, Decision, Outcome, Reason, Verdict
from resilient_session.pipeline import Next

_BUDGET_EXHAUSTED = Decision(Verdict.GIVE_UP, Reason.BUDGET_EXHAUSTED)
_RETRY = Verdict.RETRY  # a module constant, cheaper per try than the Enum class lookup


def spend_budget(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Turn a planned retry into a give-up when the host's retry budget is spent.

    It sits outside the decide stage, so budget_exhausted is the last reason checked and a
    token is withdrawn only for a retry that will really happen.
    """
    bucket = attempt.call.state.bucket
    if attempt.number == 1:
        bucket.deposit()
    outcome = call_next(attempt)
    if outcome.decision.verdict is _RETRY and not bucket.try_withdraw():
        return outcome.with_decision(_BUDGET_EXHAUSTED)
    return outcome
