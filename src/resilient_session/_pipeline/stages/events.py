"""The events stage: exactly one ``http.try`` event per try, carrying its final decision."""

from __future__ import annotations

import logging

from resilient_session._observe.events import logger_for
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next
from resilient_session.clock import Clock

from .event_fields import try_fields

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
