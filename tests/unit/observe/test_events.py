"""The http.try and breaker.transition events: their fields, their count, and their silence."""

from __future__ import annotations

import io
import json
import logging
import re
import time

import pytest
import requests
import responses
import structlog
from dirty_equals import IsFloat

from resilient_session import ResilientSession, log_json_lines
from resilient_session._observe import render
from resilient_session._observe.events import STRUCTLOG_STATE
from resilient_session.testing import FakeClock
from tests.event_fields import HTTP_TRY_FIELDS

URL = "http://user:pw@svc.test/items?token=t0p&x=1"
ANY_ITEMS = re.compile(r"http://.*svc\.test/items.*")


def test_one_event_per_try_with_every_field(harness, logs):
    """503, 503, 200 gives exactly three http.try events carrying the contract's fields."""
    outcome, _ = harness({"defaults": {"retry": {"backoff_base": 0.1}}}).run(
        503, 503, 200, url=URL, latency=0.5
    )
    assert outcome.status == 200
    tries = [event for event in logs if event["event"] == "http.try"]
    assert [(e["attempt"], e["status"], e["decision"], e["reason"]) for e in tries] == [
        (1, 503, "retry", "overload"),
        (2, 503, "retry", "overload"),
        (3, 200, "success", "ok"),
    ]
    assert tries[0] == {
        "event": "http.try",
        "log_level": "info",
        "method": "GET",
        "url": "http://svc.test/items?token=REDACTED&x=1",
        "host": "http://svc.test:80",
        "route": None,
        "attempt": 1,
        "status": 503,
        "error": None,
        "wait": IsFloat(ge=0, le=0.2),
        "total": 0.5,
        "decision": "retry",
        "reason": "overload",
        "breaker": "closed",
    }
    assert tries[2]["wait"] == 0.0
    assert tries[2]["total"] == pytest.approx(1.5 + tries[0]["wait"] + tries[1]["wait"])


def test_error_event_names_the_exception_class(harness, logs):
    """A failed try names the exception class the caller would see."""
    harness().run(requests.ReadTimeout(), 200)
    assert [e["error"] for e in logs] == ["ReadTimeout", None]


def test_fail_fast_event(harness, logs):
    """A try refused by an open breaker logs one fail_fast event with status null."""
    h = harness({"defaults": {"breaker": {"failure_threshold": 1}}})
    h.run(500)
    h.run(200)
    refused = logs[-1]
    assert (refused["status"], refused["decision"], refused["reason"], refused["error"]) == (
        None,
        "fail_fast",
        "breaker_open",
        "CircuitOpenError",
    )


def test_breaker_transitions_logged(harness, logs, clock):
    """closed→open, open→half_open and half_open→closed each log one breaker.transition."""
    h = harness({"defaults": {"breaker": {"failure_threshold": 1, "recovery_timeout": 1.0}}})
    h.run(500)
    clock.advance(1.0)
    h.run(200)
    moves = [(e["from"], e["to"]) for e in logs if e["event"] == "breaker.transition"]
    assert moves == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]
    assert all(
        e["host"] == "http://svc.test:80" for e in logs if e["event"] == "breaker.transition"
    )


def test_no_output_when_structlog_unconfigured(capsys):
    """An application that never configured structlog sees nothing on stdout or stderr."""
    assert not structlog.is_configured()
    session = ResilientSession(clock=FakeClock())
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, "http://svc.test/", status=503)
        mock.add(responses.GET, "http://svc.test/", status=200)
        assert session.get("http://svc.test/").status_code == 200
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


def test_the_events_stage_reads_the_flag_structlog_is_configured_returns():
    """STRUCTLOG_STATE.is_configured, read by the events stage on every try, is what
    structlog.is_configured() says, before an application configures structlog and after."""
    before = (STRUCTLOG_STATE.is_configured, structlog.is_configured())
    structlog.configure(processors=[])
    after = (STRUCTLOG_STATE.is_configured, structlog.is_configured())
    assert (before, after) == ((False, False), (True, True))


def test_json_lines_helper_and_no_secret_headers():
    """log_json_lines renders one JSON object per try; header values never appear."""
    stream = io.StringIO()
    log_json_lines(stream)
    session = ResilientSession(clock=FakeClock())
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, ANY_ITEMS, status=503)
        mock.add(responses.GET, ANY_ITEMS, status=200)
        session.get(
            URL,
            headers={
                "Authorization": "Bearer SECRET-A",
                "Cookie": "sid=SECRET-C",
                "Proxy-Authorization": "Basic SECRET-P",
            },
        )
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["http.try", "http.try"]
    assert {"level", "timestamp", *HTTP_TRY_FIELDS} <= set(events[0])
    for secret in ("SECRET", "pw", "t0p"):
        assert secret not in stream.getvalue()


def test_timestamps_are_utc_iso_to_the_microsecond(monkeypatch):
    """The timestamp processor formats each second once and each event's microseconds."""
    base = 1_767_607_200  # 2026-01-05T10:00:00Z
    ticks = [base * 10**9 + 7_000, base * 10**9 + 999_999_999, (base + 61) * 10**9]
    stamped = []
    for tick in ticks:
        monkeypatch.setattr(time, "time_ns", lambda tick=tick: tick)
        stamped.append(render.add_utc_timestamp(None, "info", {})["timestamp"])
    monkeypatch.undo()
    assert stamped == [
        "2026-01-05T10:00:00.000007Z",
        "2026-01-05T10:00:00.999999Z",
        "2026-01-05T10:01:01.000000Z",
    ]


def test_json_lines_match_structlog_own_renderer():
    """Our processors give the same fields and values as structlog's TimeStamper and
    JSONRenderer, timestamps aside."""
    event = {"event": "http.try", "status": 503, "wait": 0.25, "error": None, "url": "http://a/"}
    ours = json.loads(
        render.render_json(None, "info", render.add_utc_timestamp(None, "info", dict(event)))
    )
    theirs = json.loads(
        structlog.processors.JSONRenderer()(
            None,
            "info",
            structlog.processors.TimeStamper(fmt="iso", utc=True)(None, "info", dict(event)),
        )
    )
    assert ours.keys() == theirs.keys()
    assert {k: v for k, v in ours.items() if k != "timestamp"} == {
        k: v for k, v in theirs.items() if k != "timestamp"
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", ours["timestamp"])


def test_events_follow_every_reconfiguration():
    """A new configuration, an equal one with another stream, and a processor list changed in
    place each take effect from the next try."""
    session = ResilientSession(clock=FakeClock())
    first, second = io.StringIO(), io.StringIO()
    seen: list[str] = []

    def spy(_logger: object, _name: str, event_dict: dict[str, object]) -> dict[str, object]:
        seen.append(str(event_dict["event"]))
        return event_dict

    with responses.RequestsMock() as mock:
        mock.add(responses.GET, ANY_ITEMS, status=200)
        log_json_lines(first)
        session.get(URL)
        log_json_lines(second)
        session.get(URL)
        structlog.get_config()["processors"].insert(0, spy)
        session.get(URL)
        log_json_lines(first, level=logging.WARNING)
        session.get(URL)
    assert (len(first.getvalue().splitlines()), len(second.getvalue().splitlines())) == (1, 2)
    assert seen == ["http.try"]
