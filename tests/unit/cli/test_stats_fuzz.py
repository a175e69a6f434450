"""The stats reader fed random lines: it never raises, and every line is used or skipped."""

from __future__ import annotations

import io
import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resilient_session._pipeline.attempt import Reason, Verdict
from resilient_session.cli.report import stats_text
from resilient_session.cli.stats import MAX_LINE, StatsAggregator

# What must never reach a terminal: C0/C1 controls but the newlines between lines, bidi
# controls, lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)

VALID = json.dumps(
    {"event": "http.try", "host": "http://a.test:80", "attempt": 1, "decision": "success"}
    | {"reason": "ok", "total": 0.25}
)

_text = st.one_of(
    st.text(),
    st.text(st.characters(codec=None, categories=["Cc", "Cf", "Cs", "Zl", "Zp"])),
    st.builds(lambda char, count: char * count, st.characters(), st.integers(0, 70_000)),
)
_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),  # NaN and the infinities too, which json.dumps writes as NaN and Infinity
)
_json = st.recursive(
    st.none() | st.booleans() | _numbers | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_host = st.sampled_from(
    ["http://a.test:80", "https://b.test:443", "h", "http://\x1b[2J\u202e:80", "http://\ud800:1"]
)


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a valid value, sometimes any JSON value at all."""
    return st.one_of(valid, valid, valid, _json)


_try_event = st.fixed_dictionaries(
    {
        "event": st.just("http.try"),
        "host": _field(_host),
        "attempt": _field(st.integers(1, 5)),
        "decision": _field(st.sampled_from([verdict.value for verdict in Verdict])),
        "reason": _field(st.sampled_from([reason.value for reason in Reason])),
        "total": _field(st.floats(0, 100)),
    },
    optional={"status": _json, "wait": _json},
)
_transition_event = st.fixed_dictionaries(
    {
        "event": st.just("breaker.transition"),
        "host": _field(_host),
        "from": _field(st.sampled_from(["closed", "open", "half_open"])),
        "to": _field(st.sampled_from(["closed", "open", "half_open"])),
    }
)


def _nested(shape: str, depth: int) -> str:
    """JSON nested *depth* deep: a list, an object, or a list as an event's host."""
    if shape == "object":
        return '{"a": ' * depth + "1" + "}" * depth
    nested = "[" * depth + "]" * depth
    return nested if shape == "list" else '{"event": "http.try", "host": ' + nested + "}"


_deep = st.builds(_nested, st.sampled_from(["list", "object", "field"]), st.integers(1, 10_000))

_line = st.one_of(
    _try_event.map(json.dumps),
    _try_event.map(json.dumps),
    _transition_event.map(json.dumps),
    _json.map(json.dumps),
    st.binary().map(lambda data: data.decode("utf-8", "replace")),
    _text,
    _deep,
)


def _check(stats: StatsAggregator) -> None:
    summary = stats.summary()
    skipped = summary["skipped"]
    assert summary["lines"] == summary["used"] + skipped["total"]
    rows = [*summary["hosts"].values()]
    if summary["other_hosts"] is not None:
        rows.append(summary["other_hosts"])
    events = sum(
        row["tries"] + row["refused"] + row["cancelled"] + sum(row["breaker_transitions"].values())
        for row in rows
    )
    assert events == summary["used"]
    text = stats_text(summary)
    assert _UNSAFE.search(text) is None
    text.encode("utf-8")
    document = json.dumps(summary, indent=2)
    assert document.isascii()
    assert json.loads(document) == summary


@settings(
    max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(_line, max_size=20))
def test_any_lines_are_counted_or_skipped_and_render(lines):
    """Random lines of any shape never raise; each non-blank one is used or skipped."""
    stats = StatsAggregator()
    stats.feed_lines([*lines, VALID])
    assert stats.lines == sum(1 for line in lines if len(line) > MAX_LINE or line.strip()) + 1
    assert stats.summary()["hosts"]["http://a.test:80"]["successes"] >= 1
    _check(stats)


@settings(
    max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(_line, max_size=20))
def test_any_stream_is_counted_or_skipped_and_renders(lines):
    """The same lines read as one stream, where embedded newlines split them, never raise."""
    stats = StatsAggregator()
    stats.feed_file(io.StringIO("\n".join(lines)))
    _check(stats)
