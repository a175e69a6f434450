"""The events stage: exactly one ``http.try`` event per try, carrying its final decision."""

from __future__ import annotations

import logging

from resilient_session._observe.events import logger_for
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next

from .event_fields import try_fields

_INFO = logging.INFO


def emit_events(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Outermost, so the event sees every inner stage's word on the try."""
    outcome = call_next(attempt)
    logger = logger_for(_INFO)
    if logger is not None:
        runtime = attempt.call.runtime
        now = runtime.clock.monotonic()
        logger.info("http.try", **try_fields(attempt, outcome, now, runtime.redact))
    return outcome
