"""Hedging on loopback: the first try to end wins, the other is cut (the upstream sees its
connection closed), a hedge spends a budget token and a try number, and calls that may not be
replayed, or that stream, are never hedged."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from resilient_session import (
    DeadlineExceeded,
    OpenTelemetryHook,
    ResilientSession,
    log_json_lines,
)
from resilient_session._pipeline.hedging.timer import MAX_WORKERS
from resilient_session.cli.stats import StatsAggregator
from resilient_session.testing.upstream import refused_url
from tests.integration.race_server import Answer, RaceUpstream

pytestmark = pytest.mark.integration

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text("utf-8")
)
SLOW = Answer(delay=1.5)
FAST = Answer()
# A fixed delay well above a loopback answer, well below SLOW.
DELAY = 0.1


def _session(**sections: Any) -> ResilientSession:
    defaults: dict[str, Any] = {
        "retry": {"backoff_base": 0.01, "backoff_cap": 0.02},
        "hedging": {"enabled": True, "delay": DELAY},
    }
    for name, values in sections.items():
        defaults[name] = {**defaults.get(name, {}), **values}
    return ResilientSession({"defaults": defaults})


@pytest.fixture
def session() -> Iterator[ResilientSession]:
    with _session() as made:
        yield made


def _health(session: ResilientSession, upstream: RaceUpstream) -> Any:
    return session.health()[f"http://127.0.0.1:{upstream.port}"]


def _settled(session: ResilientSession, upstream: RaceUpstream, cancelled: int) -> Any:
    """The host's health once *cancelled* tries have come back cancelled (a loser finishes on
    its own thread, just after the call returns)."""
    ends = time.monotonic() + 5
    health = _health(session, upstream)
    while health.cancelled < cancelled and time.monotonic() < ends:
        time.sleep(0.01)
        health = _health(session, upstream)
    return health


def test_a_hedge_answers_for_a_slow_first_try_which_is_cut(session):
    """The first try waits 1.5 s; its hedge, sent after the delay on a second connection,
    answers at once and is what the caller gets; the first try's connection is closed, as the
    upstream sees, and counts as cancelled, not as a try."""
    with RaceUpstream(SLOW, FAST) as upstream:
        response = session.get(upstream.url("/items"))
        assert response.text == "reply 2"
        assert upstream.wait_closed(1)
        health = _settled(session, upstream, 1)
    first, hedge = upstream.seen
    assert (first.attempt, hedge.attempt) == ("1; max=4", "2; max=4")
    assert first.connection != hedge.connection
    assert upstream.closed_waiting == [first.connection]
    assert (health.hedges, health.hedge_wins, health.cancelled, health.tries) == (1, 1, 1, 1)
    assert (health.failures, health.refused, health.retries) == (0, 0, 1)


def test_the_first_try_wins_when_it_ends_first_and_the_hedge_is_cut(session):
    """A first try slower than the delay but faster than its hedge wins: its answer is the
    caller's, and the hedge's connection is closed."""
    with RaceUpstream(Answer(delay=0.4), SLOW) as upstream:
        assert session.get(upstream.url("/items")).text == "reply 1"
        assert upstream.wait_closed(1)
        health = _settled(session, upstream, 1)
    hedge = upstream.seen[1]
    assert upstream.closed_waiting == [hedge.connection]
    assert (health.hedges, health.hedge_wins, health.cancelled, health.tries) == (1, 0, 1, 1)


def test_a_cut_connection_is_never_used_again(session):
    """After a race, the next calls go out on the winner's pooled connection or a new one,
    never on the one that was cut: each is answered."""
    with RaceUpstream(SLOW, FAST) as upstream:
        session.get(upstream.url("/items"))
        assert upstream.wait_closed(1)
        upstream.script(FAST)
        assert [session.get(upstream.url("/items")).status_code for _ in range(3)] == [200] * 3
    cut = upstream.closed_waiting[0]
    assert all(seen.connection != cut for seen in upstream.seen[2:])


def test_an_answer_within_the_delay_sends_no_hedge():
    """A first try that answers before the delay (1 s here, however busy the machine) is the
    only try."""
    with _session(hedging={"delay": 1.0}) as session, RaceUpstream(FAST) as upstream:
        for _ in range(5):
            assert session.get(upstream.url("/items")).status_code == 200
        health = _health(session, upstream)
    assert (len(upstream.seen), health.hedges, health.cancelled) == (5, 0, 0)


def test_fifty_posts_without_idempotency_key_reach_the_upstream_fifty_times():
    """POST is not idempotent without an Idempotency-Key: 50 POSTs, each slower than the delay,
    are 50 requests, while one with the key is hedged."""
    with (
        _session(hedging={"delay": 0.02}) as session,
        RaceUpstream(Answer(delay=0.06)) as upstream,
    ):
        for _ in range(50):
            assert session.post(upstream.url("/orders"), data=b"{}").status_code == 200
        assert len(upstream.seen) == 50
        upstream.script(SLOW, FAST)
        keyed = session.post(upstream.url("/orders"), data=b"{}", headers={"Idempotency-Key": "k1"})
        assert keyed.text == "reply 52"
    assert [seen.method for seen in upstream.seen] == ["POST"] * 52


def test_a_body_that_cannot_be_replayed_is_never_hedged(session):
    """A PUT whose body is a generator is sent once, however slow the answer."""
    with RaceUpstream(Answer(delay=0.4)) as upstream:
        body = (chunk for chunk in [b"a", b"b"])
        assert session.put(upstream.url("/items/1"), data=body).status_code == 200
    assert len(upstream.seen) == 1


def test_a_streamed_call_is_never_hedged(session):
    """stream=True leaves the body to the caller: such a call is never raced."""
    with RaceUpstream(Answer(delay=0.4)) as upstream:
        with session.get(upstream.url("/items"), stream=True) as response:
            assert response.text == "reply 1"
        assert len(upstream.seen) == 1
        assert _health(session, upstream).hedges == 0


def test_the_deadline_ends_both_tries(session):
    """Both tries out past the call's deadline: the call raises DeadlineExceeded, and both
    connections are closed, the hedge's included."""
    with RaceUpstream(Answer(delay=5.0)) as upstream:
        with pytest.raises(DeadlineExceeded):
            session.get(upstream.url("/items"), deadline=0.5)
        assert upstream.wait_closed(2)
    assert [seen.attempt for seen in upstream.seen] == ["1; max=4", "2; max=4"]


def test_a_hedge_that_answers_a_503_is_retried_as_the_third_try(session):
    """The hedge answers 503 first: it wins, its retry is try 3 (the race used 1 and 2), and
    the slow first try is cut."""
    with RaceUpstream(SLOW, Answer(status=503), FAST) as upstream:
        assert session.get(upstream.url("/items")).text == "reply 3"
        assert upstream.wait_closed(1)
    assert [seen.attempt for seen in upstream.seen] == ["1; max=4", "2; max=4", "3; max=4"]


def test_no_budget_token_no_hedge():
    """With one token and no refill, the first slow call is hedged and the second is not: it
    waits for its own first try."""
    budget = {"ratio": 0.0, "min_per_second": 0.0, "max_tokens": 1}
    with _session(budget=budget) as session, RaceUpstream(Answer(delay=0.4), FAST) as upstream:
        assert session.get(upstream.url("/items")).text == "reply 2"
        upstream.script(Answer(delay=0.4))
        assert session.get(upstream.url("/items")).text == "reply 3"
        health = _health(session, upstream)
    assert (len(upstream.seen), health.hedges, health.budget_exhausted) == (3, 1, 1)


def test_events_mark_the_hedge_and_the_cancelled_try(session):
    """Each try is one http.try event: the cut first try is cancelled/hedge_lost, the hedge
    carries hedge: true; both validate against the schema, and stats counts as health does."""
    stream = io.StringIO()
    log_json_lines(stream)
    with RaceUpstream(SLOW, FAST) as upstream:
        session.get(upstream.url("/items"))
        health = _settled(session, upstream, 1)
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert [error.message for event in events for error in validator.iter_errors(event)] == []
    by_attempt = {event["attempt"]: event for event in events}
    assert len(events) == 2
    first, hedge = by_attempt[1], by_attempt[2]
    assert (first["decision"], first["reason"], first["error"]) == (
        "cancelled",
        "hedge_lost",
        "HedgeCancelled",
    )
    assert "hedge" not in first
    assert (hedge["decision"], hedge["status"], hedge["hedge"]) == ("success", 200, True)
    stats = StatsAggregator()
    stats.feed_lines(stream.getvalue().splitlines())
    figures = next(iter(stats.summary()["hosts"].values()))
    assert (figures["calls"], figures["tries"], figures["hedges"], figures["cancelled"]) == (
        1,
        health.tries,
        health.hedges,
        health.cancelled,
    )


def test_hedges_reuse_a_few_workers_and_leave_no_thread_behind(session):
    """Ten hedged calls in a row: the hedges run on kept workers, at most two more than before
    (a cut hedge may still be on its way back as the next is sent), not one per call."""

    def workers() -> int:
        return sum(t.name == "resilient-session-hedge" for t in threading.enumerate())

    before = workers()
    with RaceUpstream(Answer(delay=0.3), FAST) as upstream:
        for _ in range(10):
            upstream.script(Answer(delay=0.3), FAST)
            assert session.get(upstream.url("/items")).status_code == 200
        assert upstream.wait_closed(10)
    assert 1 <= workers() <= before + 2 < MAX_WORKERS
    assert _health(session, upstream).hedges == 10


def test_hedging_off_starts_no_thread():
    """With hedging off (the default), a slow call starts neither the timer nor a worker."""
    code = (
        "import threading\n"
        "from resilient_session import ResilientSession\n"
        "from tests.integration.race_server import Answer, RaceUpstream\n"
        "with RaceUpstream(Answer(delay=0.2)) as up, ResilientSession() as s:\n"
        "    s.get(up.url('/a'), deadline=2.0)\n"
        "print(sorted(t.name for t in threading.enumerate() if 'hedge' in t.name))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(  # noqa: S603 - this interpreter, the test's own code
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_a_slow_first_try_is_hedged_under_a_deadline_too(session):
    """With a deadline, the hedge is clamped and watched as the first try is, and wins."""
    with capture_logs() as logs, RaceUpstream(SLOW, FAST) as upstream:
        response = session.get(upstream.url("/items"), deadline=3.0)
        assert upstream.wait_closed(1)
        _settled(session, upstream, 1)
    assert response.text == "reply 2"
    decisions = sorted((e["attempt"], e["decision"]) for e in logs if e["event"] == "http.try")
    assert decisions == [(1, "cancelled"), (2, "success")]


def test_a_refused_connection_is_not_raced_forever():
    """A host that refuses connections: the first try fails at once (before any delay), so no
    hedge is sent and the call retries as usual."""
    with _session(retry={"max_attempts": 2}) as session:
        with pytest.raises(requests.ConnectionError):
            session.get(refused_url("/items"))
        health = next(iter(session.health().values()))
    assert (health.hedges, health.tries) == (0, 2)


def test_each_try_of_a_hedged_call_is_a_span_under_the_callers():
    """OpenTelemetry sees two client spans under the caller's span: the hedge's, marked
    resilient_session.hedge and answered 200, and the cut first try's, ended as cancelled."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = {"defaults": {"hedging": {"enabled": True, "delay": DELAY}}}
    with (
        ResilientSession(config, try_hooks=[OpenTelemetryHook(provider)]) as session,
        RaceUpstream(SLOW, FAST) as upstream,
    ):
        with provider.get_tracer("test").start_as_current_span("caller") as caller:
            assert session.get(upstream.url("/items")).text == "reply 2"
        assert upstream.wait_closed(1)
        _settled(session, upstream, 1)
    tries = {
        span.attributes["resilient_session.decision"]: span
        for span in exporter.get_finished_spans()
        if span.name == "GET" and span.attributes is not None
    }
    assert set(tries) == {"success", "cancelled"}
    won, lost = dict(tries["success"].attributes or {}), dict(tries["cancelled"].attributes or {})
    assert (won["resilient_session.hedge"], won["http.response.status_code"]) == (True, 200)
    assert (lost["error.type"], "resilient_session.hedge" in lost) == ("HedgeCancelled", False)
    parent = caller.get_span_context().span_id
    parents = [span.parent.span_id if span.parent else None for span in tries.values()]
    assert parents == [parent] * 2
