"""The structured events: one ``http.try`` per try and one ``breaker.transition`` per change."""

from __future__ import annotations

from typing import Any

import structlog

from .attempt import Attempt, Outcome
from .breaker import Transition
from .redact import redact_url

log = structlog.get_logger("resilient_session")


def listening() -> bool:
    """True when the application configured structlog.

    structlog's unconfigured default prints every event to stdout; a library must not fill an
    application's stdout uninvited, so until the application configures structlog (or calls
    :func:`resilient_session.log_json_lines`) events are not emitted at all.
    """
    return structlog.is_configured()


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
        "host": call.host,
        "attempt": attempt.number,
        "status": outcome.status,
        "error": type(error).__name__ if error is not None else None,
        "wait": round(decision.wait, 6),
        "total": round(now - call.started_at, 6),
        "decision": decision.verdict.value,
        "reason": decision.reason.value,
        "breaker": outcome.breaker.value if outcome.breaker is not None else None,
    }


def emit_transition(transition: Transition | None) -> None:
    """Log a breaker state change; called after the breaker's lock is released."""
    if transition is None or not listening():
        return
    log.warning(
        "breaker.transition",
        host=transition.host,
        **{"from": transition.from_state.value, "to": transition.to_state.value},
    )
