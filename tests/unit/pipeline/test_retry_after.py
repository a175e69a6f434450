"""Retry-After at the edges, through the whole chain on a fake clock: the decision, its reason
and the wait, as the ``http.try`` events log them."""

from __future__ import annotations

import json
import random
from collections.abc import MutableMapping
from typing import Any

import pytest

from resilient_session._pipeline.attempt import Reason, Verdict

# Backoff base 1 and cap 100: without a usable Retry-After the first overload wait is
# uniform(0, 2), which the seeded rng makes exact.
BACKOFF = {"defaults": {"retry": {"backoff_base": 1.0, "backoff_cap": 100.0}}}


def _tries(logs: list[MutableMapping[str, Any]]) -> list[tuple[str, str, float]]:
    return [
        (log["decision"], log["reason"], log["wait"]) for log in logs if log["event"] == "http.try"
    ]


@pytest.mark.parametrize(
    "header", ["31", "1e300", "1e400", "9" * 400, "inf", "INF", "+Infinity", " inf "]
)
def test_retry_after_past_the_cap_gives_up(harness, clock, logs, header):
    """Any delay over retry_after_cap (30 s), huge or infinite alike, ends the call with the 503."""
    outcome, transport = harness(BACKOFF).run((503, {"Retry-After": header}), 200)
    assert (outcome.status, transport.calls, clock.sleeps) == (503, 1, [])
    assert (outcome.decision.verdict, outcome.decision.reason) == (
        Verdict.GIVE_UP,
        Reason.RETRY_AFTER_TOO_LONG,
    )
    assert _tries(logs) == [("give_up", "retry_after_too_long", 0.0)]


@pytest.mark.parametrize("header", ["1e400", "inf"])
def test_infinite_retry_after_gives_up_under_the_largest_cap(harness, clock, logs, header):
    """Under the largest cap the config allows, an infinite delay is still too long."""
    config = {"defaults": {"retry": {"retry_after_cap": 86_400.0}}}
    outcome, transport = harness(config).run((429, {"Retry-After": header}), 200)
    assert (outcome.status, transport.calls, clock.sleeps) == (429, 1, [])
    assert _tries(logs) == [("give_up", "retry_after_too_long", 0.0)]


@pytest.mark.parametrize("header", ["0", "-0", "-0.0", "+0", "0e9"])
def test_zero_retry_after_retries_at_once_with_a_positive_zero_wait(harness, clock, logs, header):
    """Every zero, "-0" included, retries at once and logs "wait": 0.0, never -0.0."""
    outcome, transport = harness(BACKOFF).run((503, {"Retry-After": header}), 200)
    assert (outcome.status, transport.calls, clock.sleeps) == (200, 2, [])
    assert _tries(logs) == [("retry", "overload", 0.0), ("success", "ok", 0.0)]
    assert json.dumps(logs[0]["wait"]) == "0.0"


def test_retry_after_at_the_cap_is_waited_for(harness, clock, logs):
    """30 under a cap of 30 is honoured exactly."""
    outcome, _ = harness(BACKOFF).run((503, {"Retry-After": "3e1"}), 200)
    assert (outcome.status, clock.sleeps) == (200, [30.0])
    assert _tries(logs) == [("retry", "overload", 30.0), ("success", "ok", 0.0)]


@pytest.mark.parametrize(
    "header", ["nan", "NaN", "-nan", "-1", "-0.5", "-inf", "-1e400", "soon", "0x10", "1 2", ""]
)
def test_unusable_retry_after_falls_back_to_the_overload_backoff(harness, clock, logs, header):
    """NaN, negative and non-numeric values are garbage: the doubled-base backoff applies."""
    expected = random.Random(0).uniform(0, 2.0)
    outcome, transport = harness(BACKOFF).run((503, {"Retry-After": header}), 200)
    assert (outcome.status, transport.calls, clock.sleeps) == (200, 2, [expected])
    assert _tries(logs) == [("retry", "overload", round(expected, 6)), ("success", "ok", 0.0)]
