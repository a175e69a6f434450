"""Rendering events as one JSON object per line, for log pipelines."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import msgspec
import structlog
from structlog.typing import Processor

# msgspec renders an event several times faster than json.dumps; anything it cannot encode
# (an application's own objects in the event) is rendered with repr, as JSONRenderer does.
_ENCODER = msgspec.json.Encoder(enc_hook=repr)


def _dumps(event: Any, **_: Any) -> str:
    return _ENCODER.encode(event).decode()


def json_processors() -> list[Processor]:
    """Processors that turn an event into one JSON line with ``level`` and ``timestamp``.

    For an application that configures structlog itself: put these last in its chain.
    """
    return [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.JSONRenderer(serializer=_dumps),
    ]


def log_json_lines(stream: TextIO | None = None, *, level: int = logging.INFO) -> None:
    """Configure structlog to write every event as one JSON line to *stream* (stderr).

    This configures structlog for the whole process, so call it from the application, once;
    the library itself never does. Example::

        import resilient_session
        resilient_session.log_json_lines()      # {"method": "GET", ..., "event": "http.try"}
    """
    structlog.configure(
        processors=json_processors(),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
