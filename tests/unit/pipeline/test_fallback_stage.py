"""The fallback call stage on the fake clock: when a fallback runs and what it is told, stale
answers kept and served, marked, and the guards none of it touches."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from structlog.testing import capture_logs

from resilient_session import (
    CircuitOpenError,
    FailedCall,
    FallbackInfo,
    ResilientSession,
    fallback_of,
)
from resilient_session._pipeline import intent
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.chains import call_chain
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.registry import HostRegistry
from resilient_session.config import load
from resilient_session.testing import FakeClock, ScriptedTransport, build_response

URL = "https://api.test/items"
HOST = "https://api.test:443"
STALE_ON = {"fallback": {"stale": {"enabled": True}}}
FAST = {"backoff_base": 0.1, "backoff_cap": 0.1}


def _session(
    clock: FakeClock, *steps: object, fn: Any = None, **defaults: Any
) -> tuple[ResilientSession, ScriptedTransport]:
    config = {"defaults": {"retry": {**FAST, **defaults.pop("retry", {})}, **defaults}}
    session = ResilientSession(config, clock=clock, fallback=fn)
    transport = ScriptedTransport(clock, *steps)  # type: ignore[arg-type]
    transport.attach(session)
    return session, transport


def _mark(response: requests.Response) -> FallbackInfo:
    info = fallback_of(response)
    assert info is not None
    return info


class Recorder:
    """A fallback callable that records what it is told and answers with *answer*."""

    def __init__(self, answer: object = None) -> None:
        self.told: list[FailedCall] = []
        self.answer = answer

    def __call__(self, failed: FailedCall) -> object:
        self.told.append(failed)
        if callable(self.answer):
            return self.answer(failed)
        return self.answer


def test_tries_spent_call_the_fallback_once_with_the_last_answer(clock):
    """Four 503s: the callable is told once (max_attempts, the last 503, no error) and its
    response is served, marked callable."""
    fallback = Recorder(lambda failed: build_response(failed.request, (200, {}, b"default")))
    session, transport = _session(clock, 503, fn=fallback)
    response = session.get(URL)
    assert (response.status_code, response.content, transport.calls) == (200, b"default", 4)
    assert len(fallback.told) == 1
    failed = fallback.told[0]
    assert (failed.host, failed.reason, failed.error) == (HOST, "max_attempts", None)
    assert failed.response.status_code == 503
    assert failed.request.url == URL
    info = _mark(response)
    assert (info.reason, info.source.value, info.age) == ("max_attempts", "callable", None)
    health = session.health()[HOST]
    assert (health.fallbacks, health.stale_served, health.tries, health.failures) == (1, 0, 4, 4)


@pytest.mark.parametrize("status", [200, 201, 301, 304, 400, 401, 404, 409])
def test_no_fallback_for_an_answer_of_the_callers(clock, status):
    """2xx, 3xx and a 4xx no tier retries are the caller's to see: the callable never runs."""
    fallback = Recorder(lambda failed: build_response(failed.request, 200))
    session, transport = _session(clock, status, fn=fallback)
    response = session.get(URL)
    assert (response.status_code, fallback_of(response), fallback.told) == (status, None, [])
    assert transport.calls == 1


@pytest.mark.parametrize(
    ("status", "reason"),
    [(500, "max_attempts"), (408, "max_attempts"), (429, "max_attempts"), (501, "not_retryable")],
)
def test_a_final_5xx_408_or_overload_calls_the_fallback(clock, status, reason):
    fallback = Recorder()
    session, _ = _session(clock, status, fn=fallback, retry={"max_attempts": 2})
    response = session.get(URL)
    assert response.status_code == status  # None: the call ends as it would have
    assert fallback_of(response) is None
    assert [(f.reason, f.response.status_code) for f in fallback.told] == [(reason, status)]


def test_an_error_is_told_as_the_error_the_call_would_raise(clock):
    error = requests.ConnectionError("refused")
    fallback = Recorder()
    session, transport = _session(clock, error, fn=fallback, retry={"max_attempts": 2})
    with pytest.raises(requests.ConnectionError):
        session.get(URL)
    assert [(f.reason, f.response, f.error) for f in fallback.told] == [
        ("max_attempts", None, error)
    ]
    assert transport.calls == 2


def test_a_post_is_told_to_the_callable(clock):
    fallback = Recorder(lambda failed: build_response(failed.request, 202))
    session, transport = _session(clock, 500, fn=fallback)
    response = session.post(URL, data=b"job")
    assert (response.status_code, transport.calls) == (202, 1)
    assert [(f.reason, f.request.method, f.request.body) for f in fallback.told] == [
        ("not_idempotent", "POST", b"job")
    ]


def test_a_fallback_that_raises_propagates_with_the_original_kept(clock):
    class Unavailable(Exception):
        pass

    def fallback(failed: FailedCall) -> None:
        raise Unavailable("queue full")

    error = requests.ConnectionError("refused")
    session, _ = _session(clock, error, fn=fallback, retry={"max_attempts": 1})
    with pytest.raises(Unavailable) as caught:
        session.get(URL)
    assert caught.value.original is error  # type: ignore[attr-defined]
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


def test_a_fallback_that_returns_no_response_is_a_type_error_naming_it(clock):
    def answer_with_text(failed: FailedCall) -> str:
        return "sorry"

    session, _ = _session(clock, 503, fn=answer_with_text, retry={"max_attempts": 1})
    with pytest.raises(
        TypeError, match=r"fallback .*answer_with_text returned str, not a response"
    ):
        session.get(URL)


def _outage(clock: FakeClock, **stale: object) -> ResilientSession:
    session, _ = _session(
        clock,
        (200, {"Set-Cookie": "a=1", "ETag": '"v1"'}, b"fresh"),
        503,
        503,
        retry={"max_attempts": 1},
        breaker={"failure_threshold": 2, "recovery_timeout": 60},
        **stale,
    )
    return session


def _guards(session: ResilientSession) -> tuple[object, ...]:
    h = session.health()[HOST]
    return (h.breaker, h.tries, h.failures, h.rejected, h.calls, h.retries, h.tokens)


def test_breaker_open_serves_the_stale_answer_with_age_and_leaves_the_guards_be(clock):
    """200 kept; then two 503s, each answered stale, open the breaker (threshold 2); the
    refused call 30 s later is served the stale 200 with Age: 30, marked, no cookie set again.
    Every guard's figures are those of the same calls without stale serving."""
    session = _outage(clock, **STALE_ON)
    assert session.get(URL).content == b"fresh"
    first, second = session.get(URL), session.get(URL)
    assert (first.status_code, _mark(first).reason) == (200, "max_attempts")
    assert _mark(second).age == 0
    clock.advance(30)
    session.cookies.clear()
    with capture_logs() as logs:
        served = session.get(URL)
    assert (served.status_code, served.content, served.headers["Age"]) == (200, b"fresh", "30")
    assert served.headers["ETag"] == '"v1"'
    assert "Set-Cookie" not in served.headers
    assert dict(session.cookies) == {}
    info = _mark(served)
    assert (info.reason, info.source.value, info.age) == ("breaker_open", "stale", 30)
    assert [e for e in logs if e["event"] == "http.fallback"] == [
        {"event": "http.fallback", "log_level": "warning", "url": URL, "host": HOST,
         "route": None, "reason": "breaker_open", "source": "stale", "age": 30}
    ]  # fmt: skip
    health = session.health()[HOST]
    assert (health.fallbacks, health.stale_served, health.stale_entries) == (3, 3, 1)

    plain_clock = FakeClock()
    plain = _outage(plain_clock)
    plain.get(URL)
    assert [plain.get(URL).status_code for _ in range(2)] == [503, 503]
    plain_clock.advance(30)
    with pytest.raises(CircuitOpenError):
        plain.get(URL)
    assert _guards(session) == _guards(plain)
    assert _guards(plain)[:4] == ("open", 3, 2, 1)


def test_max_stale_and_stale_if_error(clock):
    """An answer 301 s old is past max_stale (300); one with stale-if-error=600 is served."""
    session, _ = _session(
        clock,
        (200, {}, b"plain"),
        (200, {"Cache-Control": "stale-if-error=600"}, b"sie"),
        503,
        retry={"max_attempts": 1},
        **STALE_ON,
    )
    session.get(URL)
    session.get(URL + "?b")
    clock.advance(301)
    assert session.get(URL).status_code == 503
    served = session.get(URL + "?b")
    assert (served.content, served.headers["Age"]) == (b"sie", "301")


def test_the_callable_runs_first_and_stale_serves_when_it_says_none(clock):
    fallback = Recorder()
    session, _ = _session(clock, 200, 503, fn=fallback, retry={"max_attempts": 1}, **STALE_ON)
    session.get(URL)
    served = session.get(URL)
    assert len(fallback.told) == 1
    assert _mark(served).source.value == "stale"


def test_no_fallback_while_the_caller_retries(clock):
    """The request being served will be retried by its own caller: the outermost layer's
    fallback applies, so neither the callable nor a stale answer runs here."""
    fallback = Recorder()
    session, _ = _session(clock, 200, 503, fn=fallback, retry={"max_attempts": 1}, **STALE_ON)
    session.get(URL)
    token = intent.enter(True)
    try:
        response = session.get(URL)
    finally:
        intent.leave(token)
    assert (response.status_code, fallback_of(response), fallback.told) == (503, None, [])


def test_a_breaker_open_refusal_reaches_the_callable_and_its_error(clock):
    fallback = Recorder()
    session, _ = _session(
        clock, 503, fn=fallback, retry={"max_attempts": 1},
        breaker={"failure_threshold": 1, "recovery_timeout": 60},
    )  # fmt: skip
    session.get(URL)
    with pytest.raises(CircuitOpenError):
        session.get(URL)
    reasons = [(f.reason, type(f.error).__name__ if f.error else None) for f in fallback.told]
    assert reasons == [("max_attempts", None), ("breaker_open", "CircuitOpenError")]


def test_no_call_chain_without_a_fallback_or_stale():
    """Zero cost: a config without stale and no callable runs its tries inline."""
    registry = HostRegistry(load({}), clock=FakeClock())

    def transport(attempt: Attempt) -> Outcome:
        raise AssertionError("never sent")

    chain = standard_chain(transport, registry.runtime)
    assert call_chain(chain, transport, registry.runtime, None, registry.stale) is None
    assert call_chain(chain, transport, registry.runtime, print, registry.stale) is not None
    stale = HostRegistry(load({"hosts": {"a.test": STALE_ON}}), clock=FakeClock())
    assert call_chain(chain, transport, stale.runtime, None, stale.stale) is not None


def test_per_call_settings_switch_stale_off_and_cut_tries(clock):
    session, transport = _session(clock, 200, 503, retry={"max_attempts": 3}, **STALE_ON)
    session.get(URL)
    off = {"fallback": {"stale": {"enabled": False}}, "retry": {"max_attempts": 1}}
    assert session.get(URL, resilience=off).status_code == 503
    assert transport.calls == 2
    assert _mark(session.get(URL)).source.value == "stale"
    assert transport.calls == 5
