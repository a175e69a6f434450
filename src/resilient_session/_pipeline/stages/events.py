"""The events stage: exactly one ``http.try`` event per try, carrying its final decision, and
the same try told to every hook on the seam (``_observe/hooks.py``)."""

from __future__ import annotations

import logging

from resilient_session._observe.events import STRUCTLOG_STATE, logger_for
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next

from .try_record import try_record

_INFO = logging.INFO
_STRUCTLOG = STRUCTLOG_STATE


def emit_events(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Outermost, so the event sees every inner stage's word on the try. The stage of a
    chain whose registry has no hooks: a try no one logs costs no record."""
    outcome = call_next(attempt)
    # Events off until the application configures structlog, which logger_for says too; read
    # as structlog.is_configured() reads it, without its frame.
    # hot path: events-off
    if not _STRUCTLOG.is_configured:
        return outcome
    logger = logger_for(_INFO)
    if logger is not None:
        runtime = attempt.call.runtime
        now = runtime.clock.monotonic()
        record = try_record(attempt, outcome, now, now, runtime.redact)
        logger.info("http.try", **record.event_fields())
    return outcome


def emit_events_and_tell(attempt: Attempt, call_next: Next, /) -> Outcome:
    """As :func:`emit_events`, then each of the registry's hooks is told the same try, with
    its start and end."""
    runtime = attempt.call.runtime
    clock = runtime.clock
    started = clock.monotonic()
    outcome = call_next(attempt)
    record = try_record(attempt, outcome, started, clock.monotonic(), runtime.redact)
    logger = logger_for(_INFO)
    if logger is not None:
        logger.info("http.try", **record.event_fields())
    for hook in runtime.hooks:
        hook.on_try(record)
    return outcome
