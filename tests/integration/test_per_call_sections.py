"""Each per-call section reaches the call against a real loopback upstream: the keys of
``timeout``, ``deadline``, ``hedging``, ``retry`` and ``fallback`` that ``resilience=`` or
``settings()`` set are the ones the call runs on, the host's again on the next call."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import requests

from resilient_session import (
    DeadlineExceeded,
    ResilientSession,
    ResponseTooLarge,
    fallback_of,
    settings,
)
from resilient_session.httpx import ResilientClient
from resilient_session.testing.upstream import FlakyUpstream, Reply
from tests.integration.retry_settings import FAST, ONE_TRY

pytestmark = pytest.mark.integration

BIG = b"x" * 5000


@pytest.fixture
def session_of() -> Iterator[Callable[..., ResilientSession]]:
    made: list[ResilientSession] = []

    def make(**defaults: Any) -> ResilientSession:
        session = ResilientSession({"defaults": {"retry": dict(ONE_TRY), **defaults}})
        made.append(session)
        return session

    yield make
    for session in made:
        session.close()


def test_timeout_and_deadline_reach_the_call(upstream: FlakyUpstream, session_of):
    """A 0.5 s answer: a per-call read timeout of 0.1 s or deadline.default of 0.15 s cuts it
    near that time; the next call, on the host's settings, is answered."""
    upstream.script("/slow", Reply(200, body=b"late", delay=0.5), cycle=True)
    session = session_of()
    url = upstream.url("/slow")
    started = time.monotonic()
    with pytest.raises(requests.ReadTimeout):
        session.get(url, resilience={"timeout": {"read": 0.1}})
    assert 0.08 < time.monotonic() - started < 0.4
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded), settings(deadline={"default": 0.15}):
        session.get(url)
    assert 0.12 < time.monotonic() - started < 0.45
    assert session.get(url).content == b"late"


def test_the_deadline_header_is_the_calls(upstream: FlakyUpstream, session_of):
    upstream.script("/h", Reply(200))
    session = session_of()
    session.get(upstream.url("/h"), deadline=2.0, resilience={"deadline": {"header": "X-Budget"}})
    session.get(upstream.url("/h"), deadline=2.0)
    own, host = (dict(hit.headers) for hit in upstream.received("/h"))
    assert ("X-Budget" in own, "X-Request-Timeout-Ms" in own) == (True, False)
    assert ("X-Budget" in host, "X-Request-Timeout-Ms" in host) == (False, True)
    assert 1000 < int(own["X-Budget"]) <= 2000


def test_hedging_is_switched_off_or_its_delay_set_per_call(upstream: FlakyUpstream, session_of):
    """The host hedges a first try out for 50 ms; a 300 ms answer is hedged on the host's
    settings, not when the call switches hedging off, nor when it sets a delay of 5 s."""
    upstream.script("/h", Reply(200, body=b"ok", delay=0.3), cycle=True)
    session = session_of(
        retry={**FAST, "max_attempts": 2}, hedging={"enabled": True, "delay": 0.05}
    )
    url = upstream.url("/h")

    def hedges() -> int:
        return int(session.health()[upstream.base_url].hedges)

    assert session.get(url, resilience={"hedging": {"enabled": False}}).content == b"ok"
    assert hedges() == 0
    assert session.get(url, resilience={"hedging": {"delay": 5.0}}).content == b"ok"
    assert hedges() == 0
    with settings(hedging={"delay": 5.0}):
        session.get(url)
    assert hedges() == 0
    session.get(url)
    assert hedges() == 1


@pytest.mark.parametrize(
    ("host_cap", "call_cap", "raises"),
    [(100_000, 1000, True), (1000, None, False), (1000, 100_000, False)],
)
def test_the_size_cap_is_the_calls(upstream: FlakyUpstream, session_of, host_cap, call_cap, raises):
    """retry.max_response_bytes set per call tightens, lifts or raises the host's cap for that
    call alone, through resilience= and settings() alike."""
    upstream.script("/big", Reply(200, body=BIG), cycle=True)
    session = session_of(retry={**ONE_TRY, "max_response_bytes": host_cap})
    url = upstream.url("/big")
    own = {"retry": {"max_response_bytes": call_cap}}
    calls: list[Callable[[], requests.Response]] = [
        lambda: session.get(url, resilience=own),
        lambda: _inside(own, lambda: session.get(url)),
    ]
    for call in calls:
        if raises:
            with pytest.raises(ResponseTooLarge):
                call()
        else:
            assert call().content == BIG
    if raises:
        assert session.get(url).content == BIG
    else:
        with pytest.raises(ResponseTooLarge):
            session.get(url)


def test_a_calls_own_cap_holds_on_a_session_that_caps_no_host(upstream: FlakyUpstream, session_of):
    """A session whose config caps no host builds uncapped responses; a call's own cap holds
    its body all the same, declared (Content-Length) or read, and the next call is uncapped."""
    upstream.script("/big", Reply(200, body=BIG), cycle=True)
    session = session_of()
    url = upstream.url("/big")
    own = {"retry": {"max_response_bytes": 1000}}
    with pytest.raises(ResponseTooLarge):
        session.get(url, resilience=own)
    with pytest.raises(ResponseTooLarge):
        _inside(own, lambda: session.get(url))
    with pytest.raises(ResponseTooLarge):
        session.get(url, stream=True, resilience=own).content  # noqa: B018 - the read raises
    assert session.get(url, resilience={"retry": {"max_response_bytes": 100_000}}).content == BIG
    assert session.get(url).content == BIG
    assert upstream.hits("/big") == 5


def test_the_size_cap_is_the_calls_on_httpx(upstream: FlakyUpstream):
    """The same through ResilientClient: settings() tighten a host's cap, and put one on a
    host that has none."""
    upstream.script("/big", Reply(200, body=BIG), cycle=True)
    url = upstream.url("/big")
    capped = {"defaults": {"retry": {**ONE_TRY, "max_response_bytes": 100_000}}}
    bare = {"defaults": {"retry": dict(ONE_TRY)}}
    for config in (capped, bare):
        with ResilientClient(config) as client:
            assert client.get(url).content == BIG
            with pytest.raises(httpx.TransportError) as raised:
                _inside({"retry": {"max_response_bytes": 1000}}, lambda: client.get(url))
            assert type(raised.value).__name__ == "ResponseTooLarge"


def test_stale_is_switched_off_or_aged_per_call(upstream: FlakyUpstream, session_of):
    """A kept answer 50 ms old: not served to a call with max_stale 0 or stale off, served to
    the next call on the host's max_stale."""
    upstream.script("/p", Reply(200, body=b"kept"), Reply(503))
    session = session_of(fallback={"stale": {"enabled": True}})
    url = upstream.url("/p")
    session.get(url)
    time.sleep(0.05)
    assert session.get(url, resilience={"fallback": {"stale": {"max_stale": 0}}}).status_code == 503
    with settings(fallback={"stale": {"enabled": False}}):
        assert session.get(url).status_code == 503
    served = session.get(url)
    assert (served.content, fallback_of(served) is not None) == (b"kept", True)


def _inside(sections: dict[str, Any], call: Callable[[], Any]) -> Any:
    with settings(**sections):
        return call()
