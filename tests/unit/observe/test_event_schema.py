"""docs/events.schema.json against events really emitted by ResilientSession."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
import responses

from resilient_session import (
    BreakerState,
    CircuitOpenError,
    DeadlineExceeded,
    Reason,
    ResilientSession,
    ResponseTooLarge,
    Verdict,
    deadline,
    log_json_lines,
)
from resilient_session.testing import FakeClock

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "docs" / "events.schema.json"
URL = "http://user:pw@svc.test/items?token=t0p&page=2"
BASE = "http://svc.test/items"
# Any URL of the items resource, userinfo and query included.
ITEMS = re.compile(r"http://.*svc\.test/items.*")


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _emitted(clock: FakeClock) -> list[dict[str, Any]]:
    """Every kind of try and transition, rendered by log_json_lines, one dict per line."""
    stream = io.StringIO()
    log_json_lines(stream)
    config = {
        "defaults": {
            "retry": {"backoff_base": 0.1, "backoff_cap": 0.2, "max_attempts": 3},
            "breaker": {"failure_threshold": 2, "recovery_timeout": 1.0},
        }
    }
    session = ResilientSession(config, clock=clock)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        # 503 then 200: retry/overload, success/ok.
        mock.add(responses.GET, ITEMS, status=503)
        mock.add(responses.GET, ITEMS, status=200)
        assert session.get(URL).status_code == 200
        # A POST without Idempotency-Key: give_up/not_idempotent.
        mock.add(responses.POST, ITEMS, status=502)
        assert session.post(BASE, data=b"{}").status_code == 502
        # A 404: give_up/not_retryable.
        mock.add(responses.GET, ITEMS, status=404)
        assert session.get(BASE).status_code == 404
        # A connection error, then a 500 that opens the breaker: retry/transient,
        # give_up/breaker_open and closed -> open.
        mock.add(responses.GET, ITEMS, body=requests.ConnectionError("reset"))
        mock.add(responses.GET, ITEMS, status=500)
        assert session.get(BASE).status_code == 500
        # The breaker is open: fail_fast/breaker_open.
        with pytest.raises(CircuitOpenError):
            session.get(BASE)
        # After the recovery time one probe succeeds: open -> half_open -> closed.
        clock.advance(1.0)
        mock.add(responses.GET, ITEMS, status=200)
        assert session.get(BASE).status_code == 200
        # A deadline already spent before the first try: fail_fast/deadline_spent.
        with deadline(0.5, clock=clock):
            clock.advance(0.6)
            with pytest.raises(DeadlineExceeded):
                session.get(BASE)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_every_emitted_event_matches_the_schema(validator, clock):
    """Each of the 12 lines emitted across every decision kind validates against the schema."""
    events = _emitted(clock)
    errors = [
        f"{event}: {error.message}" for event in events for error in validator.iter_errors(event)
    ]
    assert errors == []
    assert len(events) == 12
    assert events[0]["url"] == "http://svc.test/items?token=REDACTED&page=2"
    assert (events[0]["host"], events[0]["level"], events[0]["attempt"]) == (
        "http://svc.test:80",
        "info",
        1,
    )
    tries = [(e["decision"], e["reason"]) for e in events if e["event"] == "http.try"]
    assert tries == [
        ("retry", "overload"),
        ("success", "ok"),
        ("give_up", "not_idempotent"),
        ("give_up", "not_retryable"),
        ("retry", "transient"),
        ("give_up", "breaker_open"),
        ("fail_fast", "breaker_open"),
        ("success", "ok"),
        ("fail_fast", "deadline_spent"),
    ]
    moves = [(e["seq"], e["from"], e["to"]) for e in events if e["event"] == "breaker.transition"]
    assert moves == [(1, "closed", "open"), (2, "open", "half_open"), (3, "half_open", "closed")]


def test_schema_requires_a_positive_seq_on_transitions(validator, clock):
    """A breaker.transition without seq, or with seq 0, is invalid."""
    moved = next(e for e in _emitted(clock) if e["event"] == "breaker.transition")
    assert validator.is_valid(moved)
    assert not validator.is_valid({key: v for key, v in moved.items() if key != "seq"})
    assert not validator.is_valid({**moved, "seq": 0})


def test_schema_rejects_a_reason_that_does_not_go_with_its_decision(validator, clock):
    """A success carrying reason transient, or a fail_fast carrying a status, is invalid."""
    event = _emitted(clock)[1]
    assert (event["decision"], event["reason"]) == ("success", "ok")
    assert validator.is_valid(event)
    assert not validator.is_valid({**event, "reason": "transient"})
    assert not validator.is_valid({**event, "decision": "fail_fast", "reason": "breaker_open"})
    assert not validator.is_valid({**event, "surprise": 1})
    assert not validator.is_valid({key: v for key, v in event.items() if key != "total"})


def test_schema_enums_are_the_code_enums(validator):
    """The schema's decision, reason and breaker state sets are exactly the code's enums."""
    definitions = validator.schema["$defs"]
    properties = definitions["http_try"]["properties"]
    assert set(properties["decision"]["enum"]) == {verdict.value for verdict in Verdict}
    assert set(properties["reason"]["enum"]) == {reason.value for reason in Reason}
    assert set(definitions["breaker_state"]["enum"]) == {state.value for state in BreakerState}
    pairs = definitions["http_try"]["allOf"][0]["oneOf"]
    reasons = [reason for pair in pairs for reason in pair["properties"]["reason"]["enum"]]
    # breaker_open is both a give-up (a try opened it) and a fail-fast (it refused the try).
    assert sorted(reasons) == sorted([*(reason.value for reason in Reason), "breaker_open"])


def test_the_events_of_a_route_match_the_schema(validator, clock):
    """A route's tries and its breaker's transitions carry its pattern, the host's carry null,
    and both validate; an event without route, or with one that is no path, does not."""
    stream = io.StringIO()
    log_json_lines(stream)
    config = {
        "defaults": {"retry": {"max_attempts": 1}},
        "hosts": {"svc.test": {"routes": {"/items/*": {"breaker": {"failure_threshold": 1}}}}},
    }
    session = ResilientSession(config, clock=clock)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.add(responses.GET, ITEMS, status=500)
        mock.add(responses.GET, "http://svc.test/other", status=200)
        assert session.get(BASE).status_code == 500
        assert session.get("http://svc.test/other").status_code == 200
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["event"], e["route"]) for e in events] == [
        ("breaker.transition", "/items/*"),
        ("http.try", "/items/*"),
        ("http.try", None),
    ]
    assert [error.message for e in events for error in validator.iter_errors(e)] == []
    routed = events[1]
    assert not validator.is_valid({key: v for key, v in routed.items() if key != "route"})
    assert not validator.is_valid({**routed, "route": "items/*"})
    assert not validator.is_valid({**events[0], "route": 3})


def test_a_body_over_the_cap_is_a_success_carrying_its_error(validator, clock):
    """A 200 whose body is over retry.max_response_bytes is logged success/ok with error
    ResponseTooLarge (docs/events.md), and validates; a success with any other error does not."""
    stream = io.StringIO()
    log_json_lines(stream)
    config = {"defaults": {"retry": {"max_attempts": 1, "max_response_bytes": 10}}}
    session = ResilientSession(config, clock=clock)
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, ITEMS, status=200, body=b"x" * 100)
        with pytest.raises(ResponseTooLarge):
            session.get(BASE)
    (event,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert (event["status"], event["error"], event["decision"], event["reason"]) == (
        200,
        "ResponseTooLarge",
        "success",
        "ok",
    )
    assert [error.message for error in validator.iter_errors(event)] == []
    assert not validator.is_valid({**event, "error": "ConnectionError"})
    assert not validator.is_valid({**event, "error": "ResponseTooLarge", "status": None})
