"""The fallback rules test_fallback.py leaves to the fake clock, held against a real loopback
upstream: which answers get a fallback, what it is told of a body over the cap or a refused
connection, what its errors look like, the stale store's keys and bounds, every guard left as
it would be, and per-call settings on every verb."""

from __future__ import annotations

import io
import json
import random
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests

import resilient_session
from resilient_session import (
    ConfigError,
    FailedCall,
    FallbackInfo,
    ResilientAdapter,
    ResilientSession,
    ResponseTooLarge,
    fallback_of,
    log_json_lines,
    settings,
)
from resilient_session.config import load
from resilient_session.inbound import WSGIMiddleware
from resilient_session.testing.upstream import FlakyUpstream, Reply, refused_url
from tests.integration.retry_settings import FAST, ONE_TRY
from tests.integration.servers import waitress_server

pytestmark = pytest.mark.integration

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text("utf-8")
)


@pytest.fixture
def sessions() -> Iterator[list[ResilientSession]]:
    made: list[ResilientSession] = []
    yield made
    for session in made:
        session.close()


def _session(
    made: list[ResilientSession], fn: Any = None, stale: dict[str, Any] | None = None, **more: Any
) -> ResilientSession:
    defaults: dict[str, Any] = {"retry": dict(ONE_TRY), **more}
    if stale is not None:
        defaults["fallback"] = {"stale": {"enabled": True, **stale}}
    # One seed: two sessions fed the same tries draw the same throttle refusals.
    session = ResilientSession({"defaults": defaults}, fallback=fn, rng=random.Random(7))
    made.append(session)
    return session


def _mark(response: requests.Response) -> FallbackInfo:
    info = fallback_of(response)
    assert info is not None
    return info


class Recorder:
    """A fallback that records what it is told and answers *answer* (None: as it would)."""

    def __init__(self, answer: Any = None) -> None:
        self.told: list[FailedCall] = []
        self.answer = answer

    def __call__(self, failed: FailedCall) -> Any:
        self.told.append(failed)
        return self.answer(failed) if callable(self.answer) else self.answer


def _default(failed: FailedCall) -> requests.Response:
    response = requests.Response()
    response.status_code = 200
    response._content = b"default"
    response.request = failed.request
    return response


def test_a_body_over_the_cap_is_told_response_too_large(upstream, sessions):
    """A 200 whose body is over retry.max_response_bytes would raise ResponseTooLarge: the
    fallback is told response_too_large (DESIGN's reason for it, not the try's ok), and the
    one http.fallback event it makes is valid against docs/events.schema.json."""
    upstream.script("/big", Reply(200, body=b"x" * 5000))
    fallback = Recorder(_default)
    session = _session(sessions, fn=fallback, retry={**ONE_TRY, "max_response_bytes": 1000})
    stream = io.StringIO()
    log_json_lines(stream)
    response = session.get(upstream.url("/big"))
    assert (response.status_code, response.content) == (200, b"default")
    assert [(f.reason, f.response.status_code, type(f.error)) for f in fallback.told] == [
        ("response_too_large", 200, ResponseTooLarge)
    ]
    assert (_mark(response).reason, _mark(response).source.value) == (
        "response_too_large",
        "callable",
    )
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    served = [event for event in events if event["event"] == "http.fallback"]
    assert [(e["reason"], e["source"], e["age"]) for e in served] == [
        ("response_too_large", "callable", None)
    ]
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert [list(validator.iter_errors(event)) for event in events] == [[]] * len(events)
    assert session.health()[upstream.base_url].fallbacks == 1


def test_a_4xx_a_tier_retries_gets_the_fallback_when_its_tries_are_spent(upstream, sessions):
    """425 is in retry.transient_statuses: retried, then given up at max_attempts. A 4xx a tier
    retries is a failure, not the caller's to see, so the fallback is told once."""
    upstream.script("/early", Reply(425))
    fallback = Recorder(_default)
    session = _session(sessions, fn=fallback, retry={**FAST, "max_attempts": 2})
    response = session.get(upstream.url("/early"))
    assert (response.content, upstream.hits("/early")) == (b"default", 2)
    assert [(f.reason, f.response.status_code) for f in fallback.told] == [("max_attempts", 425)]


@pytest.mark.parametrize("status", [200, 204, 302, 304, 400, 404, 409, 410])
def test_no_fallback_for_a_2xx_3xx_or_a_4xx_no_tier_retries(upstream, sessions, status):
    """The caller's own answer: the callable never runs and nothing is marked."""
    upstream.script("/mine", Reply(status, headers={"Location": "/elsewhere"}))
    fallback = Recorder(_default)
    session = _session(sessions, fn=fallback, stale={})
    response = session.get(upstream.url("/mine"), allow_redirects=False)
    assert (response.status_code, fallback_of(response), fallback.told) == (status, None, [])
    assert session.health()[upstream.base_url].fallbacks == 0


def test_a_refused_connection_is_told_its_error_and_none_lets_it_raise(sessions):
    """Nothing listens: the fallback is told the ConnectionError the call would raise and no
    response; answering None lets the call raise that very error."""
    fallback = Recorder()
    session = _session(sessions, fn=fallback, retry={**FAST, "max_attempts": 2})
    url = refused_url("/x")
    with pytest.raises(requests.ConnectionError) as raised:
        session.get(url)
    assert [(f.reason, f.response, f.error, f.request.url) for f in fallback.told] == [
        ("max_attempts", None, raised.value, url)
    ]
    assert fallback.told[0].host == url.rsplit("/", 1)[0]


def test_a_fallback_that_raises_propagates_with_the_original_kept_unprinted(upstream, sessions):
    """Its own error reaches the caller; the call's (a 503 here: none) or the refused
    connection's is on .original, neither chained nor in the printed traceback."""

    class QueueFull(Exception):
        pass

    def broken(failed: FailedCall) -> None:
        raise QueueFull("queue full")

    upstream.script("/q", Reply(503))
    session = _session(sessions, fn=broken)
    with pytest.raises(QueueFull) as after_503:
        session.get(upstream.url("/q"))
    assert getattr(after_503.value, "original", None) is None
    with pytest.raises(QueueFull) as after_refusal:
        session.get(refused_url("/q"))
    original = after_refusal.value.original  # type: ignore[attr-defined]
    assert isinstance(original, requests.ConnectionError)
    assert (after_refusal.value.__cause__, after_refusal.value.__context__) == (None, None)
    printed = "".join(traceback.format_exception(after_refusal.value))
    assert "QueueFull: queue full" in printed
    assert "ConnectionError" not in printed


def test_a_fallback_returning_no_response_is_a_type_error_naming_it(upstream, sessions):
    """A str where a response belongs: TypeError naming the function, nothing served."""

    def apologise(failed: FailedCall) -> str:
        return "sorry"

    upstream.script("/t", Reply(503))
    session = _session(sessions, fn=apologise)
    with pytest.raises(TypeError, match=r"^fallback .*apologise returned str, not a response"):
        session.get(upstream.url("/t"))
    assert session.health()[upstream.base_url].fallbacks == 0


def test_head_and_get_are_kept_apart(upstream, sessions):
    """A HEAD's answer is served to a HEAD only, a GET's to a GET only."""
    upstream.script("/h", Reply(200, body=b"body"), Reply(503))
    session = _session(sessions, stale={})
    url = upstream.url("/h")
    session.head(url)
    assert session.get(url).status_code == 503
    served = session.head(url)
    assert (served.status_code, _mark(served).source.value, served.content) == (200, "stale", b"")


def test_a_streamed_answer_is_never_kept_but_a_kept_one_serves_a_streamed_call(upstream, sessions):
    """stream=True's answer is not kept, so its URL fails in the outage; an answer read whole
    is, and serves a later streamed call, its body read in chunks."""
    upstream.script("/s", Reply(200, body=b"streamed"), Reply(503))
    upstream.script("/r", Reply(200, body=b"read whole"), Reply(503))
    session = _session(sessions, stale={})
    with session.get(upstream.url("/s"), stream=True) as response:
        assert response.content == b"streamed"
    session.get(upstream.url("/r"))
    health = session.health()[upstream.base_url]
    assert health.stale_entries == 1
    assert session.get(upstream.url("/s")).status_code == 503
    with session.get(upstream.url("/r"), stream=True) as served:
        assert b"".join(served.iter_content(4)) == b"read whole"
        assert _mark(served).source.value == "stale"


@pytest.mark.parametrize(
    ("name", "mine", "theirs"),
    [
        ("Authorization", "Bearer alice", "Bearer bob"),
        ("Cookie", "sid=alice", "sid=bob"),
        ("Proxy-Authorization", "Basic YTph", "Basic Yjpi"),
    ],
)
def test_each_credential_keys_the_answer(upstream, sessions, name, mine, theirs):
    """Alice's answer is served to Alice alone: not to Bob, nor to a call without the header."""
    upstream.script("/me", Reply(200, body=b"alice's"), Reply(503))
    session = _session(sessions, stale={})
    url = upstream.url("/me")
    session.get(url, headers={name: mine})
    assert session.get(url, headers={name: theirs}).status_code == 503
    assert session.get(url).status_code == 503
    assert session.get(url, headers={name: mine}).content == b"alice's"


def test_the_least_recently_used_answer_goes_first(upstream, sessions):
    """Room for two: /1 and /2 kept, /1 served again, /3 kept: /2, the least recently used,
    goes; in the outage /1 and /3 are served stale and /2 fails."""
    for path in ("/1", "/2", "/3"):
        upstream.script(path, Reply(200, body=path.encode() * 300), Reply(503))
    session = _session(sessions, stale={"max_bytes": 2000, "max_entry_bytes": 1000})
    session.get(upstream.url("/1"))
    session.get(upstream.url("/2"))
    assert _mark(session.get(upstream.url("/1"))).source.value == "stale"
    session.get(upstream.url("/3"))
    health = session.health()[upstream.base_url]
    assert (health.stale_entries, health.stale_evictions) == (2, 1)
    assert 1400 < health.stale_bytes <= 2000
    assert [session.get(upstream.url(p)).status_code for p in ("/1", "/2", "/3")] == [
        200,
        503,
        200,
    ]


NEUTRAL = {
    "retry": {**FAST, "max_attempts": 2},
    "breaker": {"failure_threshold": 1000},
    "budget": {"min_per_second": 0, "max_tokens": 4},
    "throttle": {"min_tries": 4, "window": 60},
    "limit": {"initial": 8, "initial_burst": 8, "min": 4},
    "hedging": {"enabled": True, "delay": 0.05},
}
# What a fallback may change in health(): its own counts, and the time-driven figures.
OWN_FIGURES = {"fallbacks", "stale_served", "stale_entries", "stale_bytes", "open_for"}


def _guards(session: ResilientSession, host: str) -> dict[str, Any]:
    figures = session.health()[host].as_dict()
    return {name: value for name, value in figures.items() if name not in OWN_FIGURES}


def test_every_guard_counts_as_it_would_without_a_fallback(sessions):
    """The same outage (one good answer, then slow 503s that hedges race) through a session
    serving stale and one without: breaker, budget, throttle, limit and hedge figures equal,
    though one answered every failed call and the other none."""
    figures = []
    stale_or_not: tuple[dict[str, Any] | None, ...] = ({}, None)
    for stale in stale_or_not:
        with FlakyUpstream() as upstream:
            upstream.script("/n", Reply(200, body=b"kept"), Reply(503, delay=0.3))
            session = _session(sessions, stale=stale, **NEUTRAL)
            url = upstream.url("/n")
            session.get(url)
            ends: list[int | str] = []
            for _ in range(8):
                try:
                    response = session.get(url)
                except requests.RequestException as exc:
                    ends.append(type(exc).__name__)
                else:
                    info = fallback_of(response)
                    ends.append(response.status_code if info is None else info.source.value)
            guards = _guards(session, upstream.base_url)
            figures.append(guards)
            own = session.health()[upstream.base_url]
            if stale is not None:
                assert set(ends) == {"stale"}
                assert own.fallbacks == own.stale_served == 8
            else:
                assert set(ends) <= {503, "ThrottledError"}
                assert own.fallbacks == 0
    mine, theirs = figures
    assert mine == theirs
    # Each guard had something to count: hedges raced, the throttle refused, the limit shrank.
    assert (mine["hedges"] >= 1, mine["throttled"] >= 1, mine["limit"] < 8) == (True,) * 3
    assert mine["failures"] == mine["tries"] - 1


VERBS = ["get", "head", "options", "delete", "put", "patch", "post"]


@pytest.mark.parametrize("verb", VERBS)
def test_resilience_reaches_every_verb_of_the_session_and_the_module(upstream, sessions, verb):
    """resilience= sets the tries of each verb, of session.request and of the module verbs,
    and the host's max_attempts holds again on the next call without it."""
    upstream.script("/v", Reply(503))
    session = _session(
        sessions, retry={**FAST, "max_attempts": 3}, breaker={"failure_threshold": 1000}
    )
    url = upstream.url("/v")
    body = {} if verb in ("get", "head", "options", "delete") else {"data": b"x"}
    keyed: dict[str, Any] = {"headers": {"Idempotency-Key": f"k-{verb}"}, **body}
    two = {"retry": {**FAST, "max_attempts": 2}}
    getattr(session, verb)(url, resilience=two, **keyed)
    assert upstream.hits("/v") == 2
    session.request(verb.upper(), url, resilience=two, **keyed)
    assert upstream.hits("/v") == 4
    getattr(resilient_session, verb)(url, resilience=two, **keyed)
    assert upstream.hits("/v") == 6
    resilient_session.request(verb.upper(), url, resilience=two, **keyed)
    assert upstream.hits("/v") == 8
    getattr(session, verb)(url, **keyed)
    assert upstream.hits("/v") == 11


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"breaker": {"failure_threshold": 1}}, "settings.breaker: per-host state"),
        ({"limit": {"initial": 4}}, "settings.limit: per-host state"),
        ({"retyr": {"max_attempts": 1}}, r"settings.retyr: unknown key \(did you mean retry\?\)"),
        ({"hedging": {"delay": -1}}, "settings.hedging.delay"),
        (
            {"fallback": {"stale": {"max_stael": 1}}},
            r"settings.fallback.stale.max_stael: unknown key \(did you mean max_stale\?\)",
        ),
    ],
)
def test_settings_errors_name_the_key_before_anything_is_sent(
    upstream, sessions, sections, message
):
    """A per-host section, an unknown key (with its suggestion) or a bad value in settings()
    or resilience= is a ConfigError naming its path; the upstream sees nothing."""
    upstream.script("/e", Reply(200))
    session = _session(sessions)
    with pytest.raises(ConfigError, match="^" + message), settings(**sections):
        session.get(upstream.url("/e"))
    with pytest.raises(ConfigError, match="^resilience" + message.removeprefix("settings")):
        session.get(upstream.url("/e"), resilience=sections)
    assert upstream.hits("/e") == 0


def test_no_fallback_in_a_service_whose_caller_retries(upstream, sessions):
    """B, behind WSGIMiddleware on waitress, calls a C that answers 503, with a fallback: for
    a request its caller will retry (X-Request-Attempt: 1; max=3) B makes one try and passes
    the 503 on, its fallback silent; on the caller's last attempt (3; max=3) B's tries are
    spent and its fallback answers."""
    upstream.script("/c", Reply(503))
    fallback = Recorder(_default)
    session = _session(sessions, fn=fallback, retry={**FAST, "max_attempts": 3})

    def b(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        response = session.get(upstream.url("/c"))
        info = fallback_of(response)
        source = "network" if info is None else info.source.value
        start_response(f"{response.status_code} B", [("X-Answered-By", source)])
        return [response.content]

    with waitress_server(WSGIMiddleware(b)) as b_url:
        first = requests.get(b_url, headers={"X-Request-Attempt": "1; max=3"}, timeout=10)
        assert (first.status_code, first.headers["X-Answered-By"]) == (503, "network")
        assert (upstream.hits("/c"), fallback.told) == (1, [])
        last = requests.get(b_url, headers={"X-Request-Attempt": "3; max=3"}, timeout=10)
    assert (last.status_code, last.headers["X-Answered-By"], last.content) == (
        200,
        "callable",
        b"default",
    )
    assert upstream.hits("/c") == 4
    assert [failed.reason for failed in fallback.told] == ["max_attempts"]


def test_a_resilient_adapter_on_a_plain_session_runs_its_fallback(upstream):
    """ResilientAdapter(config, fallback=fn) mounted on requests.Session: a 503 after its tries
    is answered by fn, marked, counted in the adapter's registry."""
    upstream.script("/a", Reply(503))
    fallback = Recorder(_default)
    adapter = ResilientAdapter(
        {"defaults": {"retry": {**FAST, "max_attempts": 2}}}, fallback=fallback
    )
    with requests.Session() as plain:
        plain.mount("http://", adapter)
        response = plain.get(upstream.url("/a"), timeout=10)
    assert (response.status_code, response.content, upstream.hits("/a")) == (200, b"default", 2)
    assert [(f.reason, f.response.status_code) for f in fallback.told] == [("max_attempts", 503)]
    assert _mark(response).source.value == "callable"
    assert adapter.registry.health()[upstream.base_url].fallbacks == 1


def test_assigning_a_config_starts_the_stale_store_afresh(upstream, sessions):
    """docs/decisions.md: per-host state does not carry over session.config = ..., the answers
    kept included; the callable given to the session does, on the new policies."""
    upstream.script("/s", Reply(200, body=b"kept"), Reply(503))
    fallback = Recorder()
    session = _session(sessions, fn=fallback, stale={})
    session.get(upstream.url("/s"))
    assert session.health()[upstream.base_url].stale_entries == 1
    session.config = load(
        {
            "defaults": {
                "retry": {**FAST, "max_attempts": 2},
                "fallback": {"stale": {"enabled": True}},
            }
        }
    )
    response = session.get(upstream.url("/s"))
    assert (response.status_code, fallback_of(response), upstream.hits("/s")) == (503, None, 3)
    assert [(f.reason, f.response.status_code) for f in fallback.told] == [("max_attempts", 503)]
    assert session.health()[upstream.base_url].stale_entries == 0
