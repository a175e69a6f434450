"""Fallbacks and stale answers against a real loopback upstream: when each runs, what each
serves, what it never serves, and the guards neither touches; per-call settings and their
errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from structlog.testing import capture_logs

from resilient_session import (
    CircuitOpenError,
    ConfigError,
    FailedCall,
    FallbackInfo,
    ResilientSession,
    fallback_of,
    settings,
)
from resilient_session._pipeline import intent
from resilient_session.testing.upstream import FlakyUpstream, Reply
from tests.integration.retry_settings import FAST, ONE_TRY

pytestmark = pytest.mark.integration

BREAKER = {"failure_threshold": 2, "recovery_timeout": 60}


@pytest.fixture
def sessions() -> Iterator[list[ResilientSession]]:
    made: list[ResilientSession] = []
    yield made
    for session in made:
        session.close()


def _session(
    made: list[ResilientSession], fn: Any = None, stale: dict[str, Any] | None = None, **more: Any
) -> ResilientSession:
    defaults: dict[str, Any] = {"retry": dict(ONE_TRY), "breaker": dict(BREAKER), **more}
    if stale is not None:
        defaults["fallback"] = {"stale": {"enabled": True, **stale}}
    session = ResilientSession({"defaults": defaults}, fallback=fn)
    made.append(session)
    return session


def _mark(response: requests.Response) -> FallbackInfo:
    info = fallback_of(response)
    assert info is not None
    return info


def _down(upstream: FlakyUpstream, path: str, good: Reply) -> None:
    """*path* answers *good* once, then 503 for ever."""
    upstream.script(path, good, Reply(503))


def test_breaker_open_is_answered_stale_and_the_guards_count_as_without(upstream, sessions):
    """Kept 200; two 503s open the breaker; the refused call is served the kept answer,
    marked breaker_open; the breaker and budget figures equal a session without stale's."""
    _down(upstream, "/a", Reply(200, body=b"fresh", headers={"ETag": '"1"'}))
    _down(upstream, "/b", Reply(200, body=b"fresh", headers={"ETag": '"1"'}))
    stale = _session(sessions, stale={})
    plain = _session(sessions)
    url, other = upstream.url("/a"), upstream.url("/b")
    assert stale.get(url).content == b"fresh"
    assert [_mark(stale.get(url)).reason for _ in range(2)] == ["max_attempts"] * 2
    with capture_logs() as logs:
        served = stale.get(url)
    assert (served.status_code, served.content, served.headers["ETag"]) == (200, b"fresh", '"1"')
    assert int(served.headers["Age"]) <= 1
    assert _mark(served).reason == "breaker_open"
    assert _mark(served).source.value == "stale"
    events = [e for e in logs if e["event"] == "http.fallback"]
    assert [(e["reason"], e["source"], e["host"]) for e in events] == [
        ("breaker_open", "stale", upstream.base_url)
    ]
    plain.get(other)
    assert [plain.get(other).status_code for _ in range(2)] == [503, 503]
    with pytest.raises(CircuitOpenError):
        plain.get(other)
    mine, theirs = stale.health()[upstream.base_url], plain.health()[upstream.base_url]
    assert (mine.tries, mine.failures, mine.rejected, mine.calls, mine.retries) == (
        theirs.tries, theirs.failures, theirs.rejected, theirs.calls, theirs.retries
    )  # fmt: skip
    assert (mine.tries, mine.failures, mine.rejected) == (3, 2, 1)
    assert (mine.fallbacks, mine.stale_served, theirs.fallbacks) == (3, 3, 0)
    assert upstream.hits("/a") == 3


def test_tries_spent_tell_the_callable_and_serve_its_answer(upstream, sessions):
    upstream.script("/t", Reply(503))
    told: list[FailedCall] = []

    def default(failed: FailedCall) -> requests.Response:
        told.append(failed)
        response = requests.Response()
        response.status_code = 200
        response._content = b"[]"
        return response

    session = _session(sessions, fn=default, retry={**FAST, "max_attempts": 2})
    response = session.get(upstream.url("/t"))
    assert (response.status_code, response.content, upstream.hits("/t")) == (200, b"[]", 2)
    assert [(f.reason, f.response.status_code, f.error, f.host) for f in told] == [
        ("max_attempts", 503, None, upstream.base_url)
    ]
    assert _mark(response).source.value == "callable"


def test_a_post_goes_to_the_callable_queued_and_never_stale(upstream, sessions):
    """A POST that fails is handed to the callable (a queue, answered 202); with no callable,
    stale serving never answers a POST, even after a GET to the same URL was kept."""
    upstream.script("/jobs", Reply(200, body=b"list"), Reply(500))
    queued: list[bytes] = []

    def enqueue(failed: FailedCall) -> requests.Response | None:
        if failed.request.method != "POST":
            return None
        queued.append(failed.request.body)
        accepted = requests.Response()
        accepted.status_code = 202
        return accepted

    session = _session(sessions, fn=enqueue, stale={})
    url = upstream.url("/jobs")
    session.get(url)
    response = session.post(url, data=b"job-1")
    assert (response.status_code, queued, _mark(response).reason) == (
        202,
        [b"job-1"],
        "not_idempotent",
    )
    bare = _session(sessions, stale={})
    upstream.script("/jobs2", Reply(200, body=b"list"), Reply(500))
    bare.get(upstream.url("/jobs2"))
    assert bare.post(upstream.url("/jobs2"), data=b"job-2").status_code == 500


def test_a_404_is_the_callers_no_fallback_runs(upstream, sessions):
    upstream.script("/gone", Reply(404, body=b"nope"))
    told: list[FailedCall] = []
    session = _session(sessions, fn=told.append, stale={})
    response = session.get(upstream.url("/gone"))
    assert (response.status_code, fallback_of(response), told) == (404, None, [])


def test_another_users_credentials_never_get_a_stale_answer(upstream, sessions):
    _down(upstream, "/me", Reply(200, body=b"alice's"))
    session = _session(sessions, stale={})
    url = upstream.url("/me")
    session.get(url, headers={"Authorization": "Bearer alice"})
    assert session.get(url, headers={"Authorization": "Bearer bob"}).status_code == 503
    served = session.get(url, headers={"Authorization": "Bearer alice"})
    assert (served.content, _mark(served).source.value) == (b"alice's", "stale")


def test_vary_keys_the_answer_by_the_headers_it_names(upstream, sessions):
    _down(upstream, "/v", Reply(200, body=b"bonjour", headers={"Vary": "Accept-Language"}))
    session = _session(sessions, stale={})
    url = upstream.url("/v")
    session.get(url, headers={"Accept-Language": "fr"})
    assert session.get(url, headers={"Accept-Language": "de"}).status_code == 503
    served = session.get(url, headers={"Accept-Language": "fr"})
    assert served.content == b"bonjour"


def test_no_store_is_never_kept(upstream, sessions):
    _down(upstream, "/ns", Reply(200, body=b"secret", headers={"Cache-Control": "no-store"}))
    session = _session(sessions, stale={})
    session.get(upstream.url("/ns"))
    assert session.get(upstream.url("/ns")).status_code == 503
    assert session.health()[upstream.base_url].stale_entries == 0


def test_set_cookie_is_never_replayed(upstream, sessions):
    _down(upstream, "/c", Reply(200, body=b"x", headers={"Set-Cookie": "sid=abc; Path=/"}))
    session = _session(sessions, stale={})
    session.get(upstream.url("/c"))
    assert dict(session.cookies) == {"sid": "abc"}
    session.cookies.clear()
    served = session.get(upstream.url("/c"))
    assert (served.content, "Set-Cookie" in served.headers, dict(session.cookies)) == (
        b"x",
        False,
        {},
    )


def test_max_stale_zero_serves_only_an_answer_with_stale_if_error(upstream, sessions):
    _down(upstream, "/old", Reply(200, body=b"old"))
    _down(upstream, "/sie", Reply(200, body=b"sie", headers={"Cache-Control": "stale-if-error=60"}))
    session = _session(sessions, stale={"max_stale": 0})
    session.get(upstream.url("/old"))
    session.get(upstream.url("/sie"))
    import time

    time.sleep(0.02)  # past max_stale 0 on the session's real clock
    assert session.get(upstream.url("/old")).status_code == 503
    assert session.get(upstream.url("/sie")).content == b"sie"


def test_the_byte_bounds_hold(upstream, sessions):
    """An answer over max_entry_bytes is not kept; past max_bytes the least recently used
    goes, and the store never holds more than max_bytes."""
    body = b"x" * 600
    for path in ("/1", "/2", "/3"):
        upstream.script(path, Reply(200, body=body))
    upstream.script("/big", Reply(200, body=b"y" * 2000))
    session = _session(sessions, stale={"max_bytes": 1500, "max_entry_bytes": 1000})
    for path in ("/1", "/2", "/3", "/big"):
        session.get(upstream.url(path))
    health = session.health()[upstream.base_url]
    assert (health.stale_entries, health.stale_evictions) == (2, 1)
    assert 1200 < health.stale_bytes <= 1500


def test_no_fallback_while_the_caller_retries(upstream, sessions):
    _down(upstream, "/cr", Reply(200, body=b"kept"))
    told: list[FailedCall] = []
    session = _session(sessions, fn=told.append, stale={})
    session.get(upstream.url("/cr"))
    token = intent.enter(True)
    try:
        response = session.get(upstream.url("/cr"))
    finally:
        intent.leave(token)
    assert (response.status_code, fallback_of(response), told) == (503, None, [])


def test_per_call_settings_reach_the_call(upstream, sessions):
    """resilience= and settings() set the call's tries; the call's own wins key by key."""
    upstream.script("/p", Reply(503))
    session = _session(
        sessions, retry={**FAST, "max_attempts": 4}, breaker={"failure_threshold": 100}
    )
    url = upstream.url("/p")
    session.get(url, resilience={"retry": {"max_attempts": 2}})
    assert upstream.hits("/p") == 2
    with settings(retry={"max_attempts": 3}):
        session.get(url)
        assert upstream.hits("/p") == 5
        session.get(url, resilience={"retry": {"max_attempts": 1}})
        assert upstream.hits("/p") == 6
    session.get(url)
    assert upstream.hits("/p") == 10
    import resilient_session

    resilient_session.get(url, resilience={"retry": {"max_attempts": 1, **FAST}})
    assert upstream.hits("/p") == 11


@pytest.mark.parametrize(
    ("resilience", "message"),
    [
        ({"breaker": {"failure_threshold": 1}}, "resilience.breaker: per-host state"),
        (
            {"retry": {"max_atempts": 1}},
            "resilience.retry.max_atempts: unknown key (did you mean max_attempts?)",
        ),
        ({"retry": {"max_attempts": 0}}, "resilience.retry.max_attempts"),
        (
            {"retry": {"backoff_base": 5, "backoff_cap": 1}},
            "resilience.retry.backoff_cap: must be >= backoff_base",
        ),
    ],
)  # fmt: skip
def test_per_call_errors_raise_before_anything_is_sent(upstream, sessions, resilience, message):
    upstream.script("/e", Reply(200))
    session = _session(sessions)
    with pytest.raises(
        ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")
    ):
        session.get(upstream.url("/e"), resilience=resilience)
    assert upstream.hits("/e") == 0
