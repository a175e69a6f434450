"""The ``http.fallback`` event: its fields, redaction, level, and docs/events.schema.json."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import structlog

from resilient_session import Reason, log_json_lines
from resilient_session._observe.events import emit_fallback
from resilient_session._observe.otel_metrics import FALLBACK_ATTRIBUTE
from resilient_session._observe.redact import sensitive_names
from resilient_session._state.fallback import RESPONSE_TOO_LARGE, FailedCall

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[3] / "docs" / "events.schema.json").read_text("utf-8")
)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
# The reasons a call that ends well, or goes on, gives: never a fallback's.
NOT_FAILURES = {"ok", "transient", "overload", "caller_retries", "hedge_lost"}


def _fallback(**fields: Any) -> dict[str, Any]:
    stream = io.StringIO()
    log_json_lines(stream)
    values: dict[str, Any] = {
        "host": "http://svc.test:80",
        "route": None,
        "reason": "breaker_open",
        "source": "stale",
        "age": 12,
        "url": "http://user:pw@svc.test/items?token=t0p&page=2",
        "redact": sensitive_names(),
        **fields,
    }
    emit_fallback(**values)
    (line,) = stream.getvalue().splitlines()
    event: dict[str, Any] = json.loads(line)
    return event


def test_a_stale_fallback_event_carries_its_fields_redacted():
    """host, route, reason, source, age and the URL without userinfo or token, at warning."""
    event = _fallback()
    assert {key: value for key, value in event.items() if key != "timestamp"} == {
        "event": "http.fallback",
        "level": "warning",
        "url": "http://svc.test/items?token=REDACTED&page=2",
        "host": "http://svc.test:80",
        "route": None,
        "reason": "breaker_open",
        "source": "stale",
        "age": 12,
    }
    assert list(VALIDATOR.iter_errors(event)) == []


def test_a_callable_fallback_event_validates_with_a_route_and_no_age():
    """A callable's answer has no age; a route's pattern is carried as in http.try."""
    event = _fallback(source="callable", age=None, route="/items/*", reason="max_attempts")
    assert (event["source"], event["age"], event["route"]) == ("callable", None, "/items/*")
    assert list(VALIDATOR.iter_errors(event)) == []


@pytest.mark.parametrize(
    "change",
    [
        {"age": None},  # a stale answer has an age
        {"source": "callable"},  # a callable's has none
        {"age": -1},
        {"reason": "ok"},
        {"source": "cache"},
        {"surprise": 1},
    ],
)
def test_the_schema_refuses_what_no_fallback_event_holds(change):
    """Each of six changes to a valid event makes it invalid."""
    event = _fallback()
    assert VALIDATOR.is_valid(event)
    assert not VALIDATOR.is_valid({**event, **change})


def test_the_schema_reasons_are_the_failing_reasons_of_http_try():
    """http.fallback's reasons are exactly the code's reasons a failed call ends with, and
    response_too_large for a good answer whose body was over the cap."""
    reasons = SCHEMA["$defs"]["http_fallback"]["properties"]["reason"]["enum"]
    failing = {reason.value for reason in Reason} - NOT_FAILURES
    assert set(reasons) == failing | {RESPONSE_TOO_LARGE}
    assert len(reasons) == 12


def test_nothing_is_logged_below_warning_or_unconfigured(capsys):
    """With structlog unconfigured, or filtering out warning, no event is emitted."""
    stream = io.StringIO()
    emit_fallback(
        host="http://svc.test:80",
        route=None,
        reason="deadline",
        source="callable",
        age=None,
        url="http://svc.test/",
        redact=sensitive_names(),
    )
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
        logger_factory=structlog.PrintLoggerFactory(stream),
    )
    emit_fallback(
        host="http://svc.test:80",
        route=None,
        reason="deadline",
        source="callable",
        age=None,
        url="http://svc.test/",
        redact=sensitive_names(),
    )
    assert (stream.getvalue(), capsys.readouterr().out) == ("", "")


def test_the_span_attribute_name():
    """The call's last span names a fallback under resilient_session.fallback."""
    assert FALLBACK_ATTRIBUTE == "resilient_session.fallback"


def test_failed_calls_docstring_names_exactly_the_fallback_reasons():
    """What a fallback is told it may see is what the schema and the code give."""
    doc = FailedCall.__doc__ or ""
    reason_text = doc.split("reason:", 1)[1].split("response:", 1)[0]
    named = set(re.findall(r"``([a-z_]+)``", reason_text)) - {"http", "http_fallback"}
    assert named == set(SCHEMA["$defs"]["http_fallback"]["properties"]["reason"]["enum"])
