"""The fields of the ``http.try`` event, read from a finished try: beside the events stage, so
the events themselves (``_observe/events.py``) name neither the pipeline nor the state."""

from __future__ import annotations

from typing import Any

from resilient_session._observe.redact import redact_url
from resilient_session._pipeline.attempt import Attempt, Outcome


def try_fields(
    attempt: Attempt, outcome: Outcome, now: float, names: frozenset[str]
) -> dict[str, Any]:
    """The fields of the ``http.try`` event for *outcome*."""
    call = attempt.call
    decision = outcome.decision
    error = outcome.error
    return {
        "method": call.method,
        "url": redact_url(call.request.url or "", names),
        "host": call.state.key,
        "attempt": attempt.number,
        "status": outcome.status,
        "error": type(error).__name__ if error is not None else None,
        "wait": round(decision.wait, 6),
        "total": round(now - call.started_at, 6),
        # _value_ is the member's own attribute; .value goes through a descriptor each time.
        "decision": decision.verdict._value_,
        "reason": decision.reason._value_,
        "breaker": outcome.breaker._value_ if outcome.breaker is not None else None,
    }
