"""The structured events: one ``http.try`` per try and one ``breaker.transition`` per change."""

from __future__ import annotations

import copy
import logging
from typing import Any, NamedTuple

import structlog

from .attempt import Attempt, Outcome
from .breaker import Transition
from .redact import redact_url

LOGGER_NAME = "resilient_session"

_proxy = structlog.get_logger(LOGGER_NAME)


class _Resolved(NamedTuple):
    config: dict[str, Any]
    logger: Any
    info: bool
    warning: bool


_resolved: _Resolved | None = None


def logger_for(level: int) -> Any | None:
    """The ``resilient_session`` logger when an event at *level* would go anywhere, else None.

    Nothing is emitted until the application configures structlog: structlog's unconfigured
    default prints every event to stdout, and a library must not fill an application's stdout
    uninvited. The bound logger is resolved once per structlog configuration rather than on
    every event (the lazy proxy rebuilds it on each call), and a level the application filters
    out costs no event fields at all.
    """
    global _resolved
    if not structlog.is_configured():
        return None
    config = structlog.get_config()
    resolved = _resolved
    # One comparison in C: the same objects compare equal at once, and a processor list
    # changed in place no longer equals the copy of it kept here.
    if resolved is None or resolved.config != config:
        logger = _proxy.bind()
        is_enabled_for = getattr(logger, "is_enabled_for", None)
        info = is_enabled_for(logging.INFO) if is_enabled_for else True
        warning = is_enabled_for(logging.WARNING) if is_enabled_for else True
        # A copy of the processors, of their own type: a tuple stays a tuple and equal.
        kept = {**config, "processors": copy.copy(config["processors"])}
        resolved = _resolved = _Resolved(kept, logger, info, warning)
    enabled = resolved.info if level <= logging.INFO else resolved.warning
    return resolved.logger if enabled else None


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


def emit_transition(transition: Transition) -> None:
    """Log a breaker state change; called after the breaker's lock is released."""
    logger = logger_for(logging.WARNING)
    if logger is not None:
        logger.warning(
            "breaker.transition",
            host=transition.host,
            **{"from": transition.from_state.value, "to": transition.to_state.value},
        )
