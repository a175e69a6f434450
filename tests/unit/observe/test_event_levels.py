"""Events under stdlib logging follow the level set at the time of each try."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from resilient_session._observe import events
from resilient_session._observe.events import LOGGER_NAME


@pytest.fixture
def stdlib_lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """structlog's stdlib recipe: LoggerFactory, stdlib BoundLogger, and a handler whose
    ProcessorFormatter renders JSON into a stream; the logger is put back as found."""
    logger = logging.getLogger(LOGGER_NAME)
    saved = (logger.level, logger.propagate, logger.disabled)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processor=structlog.processors.JSONRenderer())
    )
    logger.addHandler(handler)
    logger.propagate = False
    structlog.configure(
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)
        logger.level, logger.propagate, logger.disabled = saved
        # The stdlib caches isEnabledFor answers; setting the level again clears that cache.
        logger.setLevel(saved[0])


def _events(stream: io.StringIO) -> list[str]:
    return [json.loads(line)["event"] for line in stream.getvalue().splitlines()]


def test_http_try_follows_the_stdlib_level_lowered_raised_and_lowered_again(harness, stdlib_lines):
    """A first call while INFO is off logs nothing; each later call logs http.try exactly when
    INFO is on at the time of its try."""
    logger, stream = stdlib_lines
    h = harness()
    counts = []
    for level in (logging.WARNING, logging.INFO, logging.WARNING, logging.INFO, logging.DEBUG):
        logger.setLevel(level)
        h.run(200)
        counts.append(len(_events(stream)))
    assert counts == [0, 1, 1, 2, 3]
    assert set(_events(stream)) == {"http.try"}


def test_breaker_transition_follows_the_stdlib_level(harness, clock, stdlib_lines):
    """breaker.transition (WARNING) is logged exactly while WARNING is on, http.try only while
    INFO is."""
    logger, stream = stdlib_lines
    h = harness({"defaults": {"breaker": {"failure_threshold": 1, "recovery_timeout": 1.0}}})
    logger.setLevel(logging.ERROR)
    h.run(500)  # closed -> open, not logged
    clock.advance(1.0)
    logger.setLevel(logging.WARNING)
    h.run(500)  # open -> half_open -> open, logged
    clock.advance(2.0)
    logger.setLevel(logging.ERROR)
    h.run(200)  # open -> half_open -> closed, not logged
    logger.setLevel(logging.INFO)
    h.run(500)  # closed -> open, logged with its http.try
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["event"], e.get("seq"), e.get("from"), e.get("to")) for e in lines] == [
        ("breaker.transition", 2, "open", "half_open"),
        ("breaker.transition", 3, "half_open", "open"),
        ("breaker.transition", 6, "closed", "open"),
        ("http.try", None, None, None),
    ]
    assert [e["level"] for e in lines] == ["warning", "warning", "warning", "info"]


def test_disabling_the_stdlib_logger_silences_events(harness, stdlib_lines):
    """logger.disabled, which only the stdlib's isEnabledFor knows of, holds from the next try."""
    logger, stream = stdlib_lines
    logger.setLevel(logging.INFO)
    h = harness()
    h.run(200)
    logger.disabled = True
    h.run(200)
    logger.disabled = False
    h.run(200)
    assert _events(stream) == ["http.try", "http.try"]


def test_a_fixed_level_is_decided_once_per_configuration(monkeypatch):
    """A filtering bound logger's level is read when the configuration is first seen, not on
    every event: its class fixes it (structlog 24 has no is_enabled_for to ask)."""
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.ReturnLoggerFactory(),
    )
    resolved: list[object] = []
    original = events._resolve

    def counting(config: Any) -> Any:
        resolved.append(config)
        return original(config)

    monkeypatch.setattr(events, "_resolve", counting)
    for _ in range(3):
        assert events.logger_for(logging.INFO) is None
        assert events.logger_for(logging.WARNING) is not None
    assert len(resolved) == 1
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    assert events.logger_for(logging.WARNING) is None
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    assert events.logger_for(logging.INFO) is not None
    assert len(resolved) == 3


@pytest.mark.parametrize(
    "wrapper_class",
    [structlog.BoundLogger, structlog.stdlib.BoundLogger],
    ids=["generic", "stdlib-over-print"],
)
def test_a_bound_logger_without_a_level_check_logs_every_try(harness, wrapper_class):
    """structlog's generic BoundLogger forwards any name it lacks to the wrapped logger as a log
    call, and its stdlib BoundLogger asks the wrapped logger's isEnabledFor: over a PrintLogger
    neither can say a level is on. structlog logs through both; each try is logged, and the
    call is answered, where asking them raised AttributeError from every call."""
    stream = io.StringIO()
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        wrapper_class=wrapper_class,
        logger_factory=structlog.PrintLoggerFactory(file=stream),
    )
    h = harness()
    outcome, transport = h.run(503, 200)
    assert outcome.response is not None
    assert outcome.response.status_code == 200
    assert transport.calls == 2
    assert _events(stream) == ["http.try", "http.try"]
