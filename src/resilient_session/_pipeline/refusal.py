"""A try refused or cut before it reached the upstream: the one outcome every stage that
refuses a try returns."""

from __future__ import annotations

from .attempt import Attempt, Outcome, Reason


def refuse(attempt: Attempt, reason: Reason, message: str) -> Outcome:
    """*attempt* refused for *reason*: the exception the call's wire raises for it, saying
    *message*, and the last try that reached the upstream, which the caller gets instead."""
    error = attempt.call.wire.refusal(reason, message, attempt.request)
    return Outcome(error=error, refused=reason, fallback=attempt.last_real)
