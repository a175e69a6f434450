"""The streaming stats aggregator and its bounded latency histogram."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilient_session.cli.sketch import LogHistogram
from resilient_session.cli.stats import StatsAggregator

RECORDED = Path(__file__).resolve().parents[2] / "data" / "events.jsonl"

A = "http://127.0.0.1:8080"
B = "http://127.0.0.1:9090"


def _try(host: str = A, attempt: int = 1, decision: str = "success", **fields) -> str:
    reason = {"success": "ok", "retry": "transient", "give_up": "max_attempts"}.get(
        decision, "breaker_open"
    )
    event = {
        "event": "http.try",
        "host": host,
        "attempt": attempt,
        "decision": decision,
        "reason": fields.pop("reason", reason),
        "total": 0.1,
        **fields,
    }
    return json.dumps(event)


def _within_one_percent(reported: float | None, exact: float) -> bool:
    # The bound is inclusive: a value on a bucket's edge is off by exactly 1 %.
    return reported is not None and abs(reported - exact) <= 0.01 * exact * (1 + 1e-9)


def _nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_recorded_file_figures_per_host():
    """The hand-written recording gives its known counts, per host, to the event."""
    stats = StatsAggregator()
    with RECORDED.open(encoding="utf-8") as lines:
        stats.feed_lines(lines)
    summary = stats.summary()
    first, second = summary["hosts"][A], summary["hosts"][B]
    assert {k: v for k, v in first.items() if not k.startswith("total_")} == {
        "calls": 5,
        "tries": 8,
        "tries_per_call": 1.6,
        "refused": 0,
        "retries": 3,
        "hedges": 0,
        "cancelled": 0,
        "successes": 2,
        "give_ups": {"max_attempts": 1, "not_idempotent": 1, "retry_after_too_long": 1},
        "fail_fasts": {},
        "breaker_transitions": {},
        "breaker_trips": 0,
        "final_tries": 5,
    }
    assert {k: v for k, v in second.items() if not k.startswith("total_")} == {
        "calls": 5,
        "tries": 4,
        "tries_per_call": 0.8,
        "refused": 2,
        "retries": 1,
        "hedges": 0,
        "cancelled": 0,
        "successes": 1,
        "give_ups": {"breaker_open": 1, "deadline": 1},
        "fail_fasts": {"breaker_open": 2},
        "breaker_transitions": {"closed->open": 1, "half_open->closed": 1, "open->half_open": 1},
        "breaker_trips": 1,
        "final_tries": 5,
    }
    assert (summary["lines"], summary["used"]) == (21, 17)
    assert summary["skipped"] == {
        "total": 4,
        "not_json": 2,
        "too_long": 0,
        "other_event": 1,
        "malformed": 1,
    }
    assert (summary["other_hosts"], summary["hosts_folded"]) == (None, 0)


def test_recorded_file_percentiles_within_one_percent():
    """Final-try totals 0.03/0.04/0.05/0.25/0.4 give p50 0.05 and p99 0.4, within 1 %;
    on the second host 0/0/0.02/0.105/1.0 give 0.02 and 1.0."""
    stats = StatsAggregator()
    stats.feed_lines(RECORDED.read_text(encoding="utf-8").splitlines())
    hosts = stats.summary()["hosts"]
    assert _within_one_percent(hosts[A]["total_p50"], 0.05)
    assert _within_one_percent(hosts[A]["total_p99"], 0.4)
    assert _within_one_percent(hosts[B]["total_p50"], 0.02)
    assert _within_one_percent(hosts[B]["total_p99"], 1.0)


def test_only_final_tries_feed_the_percentiles():
    """A retried try's total is left out: one call of 3 tries adds one sample, its last."""
    stats = StatsAggregator()
    stats.feed_lines(
        [
            _try(attempt=1, decision="retry", total=5.0),
            _try(attempt=2, decision="retry", total=6.0),
            _try(attempt=3, decision="success", total=7.0),
        ]
    )
    figures = stats.summary()["hosts"][A]
    assert (figures["calls"], figures["tries"], figures["retries"], figures["final_tries"]) == (
        1,
        3,
        2,
        1,
    )
    assert _within_one_percent(figures["total_p50"], 7.0)


def test_interleaved_calls_are_counted_per_event():
    """Two calls whose tries interleave (two threads) still count 2 calls and 4 tries."""
    stats = StatsAggregator()
    stats.feed_lines(
        [
            _try(attempt=1, decision="retry"),
            _try(attempt=1, decision="retry"),
            _try(attempt=2, decision="success"),
            _try(attempt=2, decision="give_up"),
        ]
    )
    figures = stats.summary()["hosts"][A]
    assert (figures["calls"], figures["tries"], figures["tries_per_call"]) == (2, 4, 2.0)
    assert (figures["successes"], figures["give_ups"]) == (1, {"max_attempts": 1})


def test_caller_retries_give_ups_are_counted_by_name():
    """A give-up because the inbound caller will retry is a give-up like any other, by reason."""
    stats = StatsAggregator()
    stats.feed_lines(
        [
            _try(decision="give_up", reason="caller_retries"),
            _try(decision="give_up", reason="caller_retries"),
            _try(decision="give_up"),
        ]
    )
    figures = stats.summary()["hosts"][A]
    assert (figures["calls"], figures["tries"], stats.skipped.malformed) == (3, 3, 0)
    assert figures["give_ups"] == {"caller_retries": 2, "max_attempts": 1}


def test_other_lines_are_skipped_and_counted_by_kind():
    """Plain text, a JSON list, another event and a try without host are 4 skipped lines."""
    stats = StatsAggregator()
    stats.feed_lines(
        [
            "Starting worker",
            "[1, 2]",
            "",
            '{"event": "app.ready"}',
            '{"event": "http.try", "attempt": 1}',
            _try(attempt=True),
            _try(decision="maybe"),
            '{"event": "breaker.transition", "host": "h", "from": "closed", "to": "ajar"}',
            _try(total=-1),
        ]
    )
    summary = stats.summary()
    assert summary["hosts"] == {}
    assert (summary["lines"], summary["used"]) == (8, 0)
    assert summary["skipped"] == {
        "total": 8,
        "not_json": 2,
        "too_long": 0,
        "other_event": 1,
        "malformed": 5,
    }


def test_hosts_without_final_tries_report_no_percentiles():
    """A host seen only in a breaker.transition has 0 calls and null tries_per_call and p50."""
    stats = StatsAggregator()
    stats.feed('{"event": "breaker.transition", "host": "h", "from": "closed", "to": "open"}')
    figures = stats.summary()["hosts"]["h"]
    assert (figures["calls"], figures["tries_per_call"], figures["total_p50"]) == (0, None, None)
    assert figures["breaker_trips"] == 1


@given(st.lists(st.floats(min_value=1e-6, max_value=1e5), min_size=1, max_size=300))
def test_histogram_quantiles_are_within_the_relative_error(values):
    """For any values in range, p50 and p99 are within 1 % of the exact nearest-rank value."""
    histogram = LogHistogram()
    for value in values:
        histogram.add(value)
    for q in (0.5, 0.99):
        assert _within_one_percent(histogram.quantile(q), _nearest_rank(values, q))


def test_histogram_size_is_bounded_by_range_not_by_count():
    """200,000 values over the 12 decades of the range fill exactly its 1,382 buckets."""
    gamma_log = math.log(1.01 / 0.99)
    bound = math.ceil(math.log(1e6) / gamma_log) - math.ceil(math.log(1e-6) / gamma_log) + 1
    histogram = LogHistogram()
    for index in range(200_000):
        histogram.add(10 ** (-6 + 12 * index / 200_000))
    for outlier in (1e9, 1e12):  # past the range: counted in the top bucket, no new one
        histogram.add(outlier)
    assert (bound, histogram.count, histogram.bucket_count) == (1382, 200_002, 1382)


def test_histogram_zeros_and_empty():
    """An empty histogram has no quantile; values under 1 microsecond report as exactly 0."""
    histogram = LogHistogram()
    assert histogram.quantile(0.5) is None
    for value in (0.0, 0.0, 5e-7, 2.0):
        histogram.add(value)
    assert histogram.quantile(0.5) == 0.0
    assert histogram.quantile(0.75) == 0.0
    assert _within_one_percent(histogram.quantile(1.0), 2.0)


def test_histogram_rejects_bad_input():
    """Negative values, NaN and quantiles outside (0, 1] are errors, not silent garbage."""
    histogram = LogHistogram()
    with pytest.raises(ValueError, match="must be >= 0"):
        histogram.add(-0.5)
    with pytest.raises(ValueError, match="must be >= 0"):
        histogram.add(math.nan)
    with pytest.raises(ValueError, match=r"quantile must be in \(0, 1\]"):
        histogram.quantile(0)
    with pytest.raises(ValueError, match="relative_error"):
        LogHistogram(relative_error=1.5)


def test_refused_tries_are_not_tries_and_agree_with_health(harness, logs):
    """Two 503s open the breaker (threshold 2) and three calls are refused: stats counts 2
    tries and 3 refused, as session.health() counts 2 tries and 3 refused."""
    h = harness({"defaults": {"retry": {"max_attempts": 1}, "breaker": {"failure_threshold": 2}}})
    for step in (503, 503, 200, 200, 200):
        h.run(step)
    stats = StatsAggregator()
    stats.feed_lines(json.dumps(event) for event in logs)
    figures = stats.summary()["hosts"]["http://svc.test:80"]
    health = h.registry.health()["http://svc.test:80"]
    assert (figures["calls"], figures["tries"], figures["refused"]) == (5, 2, 3)
    assert (figures["tries"], figures["refused"]) == (health.tries, health.refused)
    assert (figures["tries_per_call"], figures["fail_fasts"]) == (0.4, {"breaker_open": 3})


def test_state_degraded_and_restored_events_are_counted_per_session():
    """Two workers that each lost Redis once and got it back count 2 degraded and 2
    restored; one without its backend field is malformed, and none touches a host's row."""
    aggregator = StatsAggregator()
    degraded = {"event": "state.degraded", "backend": "redis", "url": "redis://r:6379/0"}
    restored = {"event": "state.restored", "backend": "redis", "degraded_for": 5.2}
    aggregator.feed_lines(
        [
            json.dumps(degraded),
            _try(),
            json.dumps(degraded),
            json.dumps(restored),
            json.dumps(restored),
            json.dumps({"event": "state.degraded", "backend": 7}),
        ]
    )
    summary = aggregator.summary()
    assert summary["state"] == {"degraded": 2, "restored": 2}
    assert (summary["used"], summary["skipped"]["malformed"]) == (5, 1)
    assert list(summary["hosts"]) == [A]
