"""The events stage: exactly one ``http.try`` event per try, carrying its final decision,
and the fields of that event."""

from __future__ import annotations

import logging
from typing import Any

from resilient_session._observe.events import logger_for
from resilient_session._observe.redact import redact_url
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next
from resilient_session.clock import Clock

_INFO = logging.INFO


class EmitEvents:
    """Outermost, so the event sees every inner stage's word on the try."""

    def __init__(self, clock: Clock, redact: frozenset[str]) -> None:
        self._clock = clock
        self._redact = redact

    def __call__(self, attempt: Attempt, call_next: Next, /) -> Outcome:
        outcome = call_next(attempt)
        logger = logger_for(_INFO)
        if logger is not None:
            now = self._clock.monotonic()
            logger.info("http.try", **try_fields(attempt, outcome, now, self._redact))
        return outcome


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
