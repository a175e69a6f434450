"""The stats reader against hostile input: any shape of line, huge lines, a million hosts."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from resilient_session.cli.report import stats_text
from resilient_session.cli.stats import MAX_HOSTS, MAX_LINE, StatsAggregator

HOST = "http://127.0.0.1:8080"
GOOD = {"event": "http.try", "host": HOST, "attempt": 1, "decision": "success", "reason": "ok"}
TRANSITION = {"event": "breaker.transition", "host": HOST, "from": "closed", "to": "open"}


def _try(**fields: object) -> str:
    return json.dumps({**GOOD, "total": 0.1, **fields})


def _transition(**fields: object) -> str:
    return json.dumps({**TRANSITION, **fields})


HOSTILE_FIELDS = [
    _try(decision=[]),
    _try(decision={}),
    _try(decision=1),
    _try(reason=[]),
    _try(reason={"ok": 1}),
    _try(reason="made_up"),
    _try(host=[]),
    _try(host={}),
    _try(host=8080),
    _try(host=""),
    _try(host="h" * 513),
    _try(attempt="1"),
    _try(attempt=1.0),
    _try(attempt=[1]),
    _try(attempt=None),
    _try(total="0.1"),
    _try(total=[0.1]),
    _try(total=None),
    _try(total=-0.5),
    _try(total=10**400),
    _try(total=float("nan")),
    _try(total=float("inf")),
    _try().replace("0.1", "1e400"),
    _try().replace("0.1", "-Infinity"),
    _transition(**{"from": []}),
    _transition(**{"from": {}}),
    _transition(to=["open"]),
    _transition(to={"open": True}),
    _transition(host=None),
]


@pytest.mark.parametrize("line", HOSTILE_FIELDS)
def test_a_field_of_the_wrong_type_or_range_is_skipped_as_malformed(line):
    """One of our events with any field of the wrong type is skipped and counted, never raised."""
    stats = StatsAggregator()
    stats.feed_lines([line, _try()])
    summary = stats.summary()
    assert (summary["lines"], summary["used"], summary["skipped"]["malformed"]) == (2, 1, 1)
    assert summary["hosts"][HOST]["successes"] == 1


def test_fields_stats_does_not_read_do_not_matter():
    """A status, url or wait of any shape leaves the try counted: stats reads only its fields."""
    stats = StatsAggregator()
    stats.feed(_try(status=[], url={}, wait="soon", event_extra=10**400))
    assert (stats.used, stats.summary()["hosts"][HOST]["tries"]) == (1, 1)


@pytest.mark.parametrize(
    "line",
    [
        "[" * 30_000 + "]" * 30_000,
        '{"a": ' * 9_000 + "1" + "}" * 9_000,
        '{"event": "http.try", "host": ' + "[" * 30_000 + "]" * 30_000 + "}",
        "1" * 5_000,
        '"\\ud800"',
        "NaN",
    ],
    ids=["deep-list", "deep-object", "deep-field", "too-many-digits", "string", "nan"],
)
def test_deep_or_odd_json_is_skipped_as_not_json(line):
    """Nesting past the parser's depth, ints past its digit limit and non-objects are not JSON
    events: skipped and counted."""
    stats = StatsAggregator()
    stats.feed_lines([line, _try()])
    assert (stats.lines, stats.used, stats.skipped.total) == (2, 1, 1)
    # How deep the parser goes depends on the interpreter's recursion limit at the time: a
    # line it cannot parse is not JSON, one it can is an object that is no event of ours.
    assert stats.skipped.not_json + stats.skipped.other_event == 1


def test_a_line_past_the_limit_is_too_long():
    """A line of MAX_LINE characters (newline included) is read; one more is skipped."""
    at_limit = _try(url="x" * (MAX_LINE - len(_try(url="")) - 1)) + "\n"
    assert len(at_limit) == MAX_LINE
    over = at_limit.replace("xx", "xxx", 1)
    stats = StatsAggregator()
    stats.feed_file(io.StringIO(at_limit + over + _try()))
    assert (stats.lines, stats.used, stats.skipped.too_long) == (3, 2, 1)


def test_a_line_of_many_megabytes_is_skipped_without_holding_it():
    """A 32 MB line is skipped while holding at most a few of its 64 KiB pieces, and the line
    after it still counts."""
    text = "x" * 32_000_000 + "\n" + _try() + "\n"
    stream = io.StringIO(text)
    stats = StatsAggregator()
    tracemalloc.start()
    try:
        stats.feed_file(stream)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (stats.lines, stats.used, stats.skipped.too_long) == (2, 1, 1)
    assert peak < 1_000_000


def _fed_with_peak(count: int) -> tuple[StatsAggregator, int]:
    """Each of *count* hosts makes one call; every tenth is also refused once."""
    stats = StatsAggregator()
    # Decoded events straight to add(): the JSON parser's garbage would only slow the tracing.
    sent = {**GOOD, "total": 0.1}
    refused = {**sent, "attempt": 2, "decision": "fail_fast", "reason": "breaker_open"}
    tracemalloc.start()
    try:
        for index in range(count):
            sent["host"] = refused["host"] = f"http://h{index}.test:80"
            stats.add(sent)
            if index % 10 == 0:
                stats.add(refused)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return stats, peak


def test_hosts_past_the_limit_share_one_row_and_the_totals_add_up():
    """100,000 hosts make 1,000 rows and one "(other hosts)" row; calls, tries and refusals
    across the rows add up to the input's, and the peak memory is that of 10,000 hosts."""
    small, small_peak = _fed_with_peak(10_000)
    stats, peak = _fed_with_peak(100_000)
    summary = stats.summary()
    rows = [*summary["hosts"].values(), summary["other_hosts"]]
    assert (len(small.hosts), len(summary["hosts"]), summary["max_hosts"]) == (1_000, 1_000, 1_000)
    totals = [sum(row[key] for row in rows) for key in ("calls", "tries", "refused", "successes")]
    assert totals == [100_000, 100_000, 10_000, 100_000]
    assert (summary["other_hosts"]["calls"], summary["other_hosts"]["refused"]) == (99_000, 9_900)
    # The count of folded hosts is a HyperLogLog estimate, within a few per cent.
    assert summary["hosts_folded"] == pytest.approx(99_000, rel=0.03)
    assert peak < small_peak * 1.2
    text = stats_text(summary).splitlines()
    assert text[MAX_HOSTS + 1].split() == [
        "(other", "hosts)", "99000", "99000", "1.00", "9900", "0", "0", "99000", "0", "0", "0.099",
        "s", "0.099", "s",
    ]  # fmt: skip
    assert text[MAX_HOSTS + 2] == (
        f"(other hosts): about {summary['hosts_folded']:,} more hosts, past the first 1,000 "
        "seen, share this row"
    )


def test_a_small_limit_folds_from_the_next_host():
    """With max_hosts 2 the third and fourth hosts fold; the estimate is exact at this size."""
    stats = StatsAggregator(max_hosts=2)
    stats.feed_lines(_try(host=f"http://h{index}.test:80") for index in (1, 2, 3, 4, 3, 1))
    summary = stats.summary()
    assert sorted(summary["hosts"]) == ["http://h1.test:80", "http://h2.test:80"]
    assert summary["hosts"]["http://h1.test:80"]["calls"] == 2
    assert (summary["other_hosts"]["calls"], summary["hosts_folded"]) == (3, 2)
