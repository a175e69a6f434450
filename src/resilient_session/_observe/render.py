"""Rendering events as one JSON object per line, for log pipelines."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

import msgspec
import structlog
from structlog.typing import Processor

# msgspec renders an event several times faster than json.dumps; anything it cannot encode
# (an application's own objects in the event) is rendered with repr, as JSONRenderer does.
_ENCODER = msgspec.json.Encoder(enc_hook=repr)


def render_json(_logger: Any, _method_name: str, event_dict: Any) -> str:
    """The last processor: the event as one JSON object, as ``JSONRenderer`` renders it."""
    return _ENCODER.encode(event_dict).decode()


def add_utc_timestamp(_logger: Any, _method_name: str, event_dict: Any) -> Any:
    """Add ``timestamp``: ISO 8601 UTC to the microsecond, ``2026-01-05T10:00:00.000000Z``.

    Formatting the date and time of day once per second, not once per event, takes most of
    the cost out of structlog's ``TimeStamper``.
    """
    seconds, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    second, prefix = _last_second
    if seconds != second:
        prefix = _format_second(seconds)
    event_dict["timestamp"] = f"{prefix}.{nanoseconds // 1000:06d}Z"
    return event_dict


def _format_second(seconds: int) -> str:
    global _last_second
    prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    # One tuple, so a thread reading it never pairs one second with another's text.
    _last_second = (seconds, prefix)
    return prefix


_last_second: tuple[int, str] = (-1, "")


def json_processors() -> list[Processor]:
    """Processors that turn an event into one JSON line with ``level`` and ``timestamp``.

    For an application that configures structlog itself: put these last in its chain.
    """
    return [structlog.processors.add_log_level, add_utc_timestamp, render_json]


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
