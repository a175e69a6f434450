"""The record of a finished try (the ``http.try`` event's fields and more), read from the try:
beside the events stage, so the hooks themselves (``_observe/hooks.py``) name neither the
pipeline nor the state."""

from __future__ import annotations

from resilient_session._observe.hooks import TryRecord
from resilient_session._observe.redact import redact_url
from resilient_session._pipeline.attempt import Attempt, Outcome

_new_tuple = tuple.__new__


def try_record(
    attempt: Attempt,
    outcome: Outcome,
    started: float,
    now: float,
    names: frozenset[str],
    hedge: bool = False,
) -> TryRecord:
    """What every hook is told of *outcome*, which started at *started* and ended *now*;
    *hedge* when the try was a hedge (``_pipeline/hedging/``)."""
    call = attempt.call
    decision = outcome.decision
    error = outcome.error
    refused = outcome.refused
    # Positional, in the fields' declared order.
    # hot path: positional-tuples
    return _new_tuple(
        TryRecord,
        (
            call.method,
            redact_url(call.url, names),
            call.state.host,
            call.state.route,
            attempt.number,
            outcome.status,
            type(error).__name__ if error is not None else None,
            round(decision.wait, 6),
            round(now - call.started_at, 6),
            # hot path: enum-value
            decision.verdict._value_,
            decision.reason._value_,
            outcome.breaker._value_ if outcome.breaker is not None else None,
            hedge,
            started,
            now,
            refused._value_ if refused is not None else None,
        ),
    )
