"""ResilientSession where a requests user first meets it: copies, cookies, bodies, deadlines."""

from __future__ import annotations

import array
import copy
import pickle

import pytest
import requests

from resilient_session import HostRegistry, ResilientAdapter, ResilientSession
from resilient_session._transport.body import DRAIN_LIMIT
from tests.functional.conftest import FAST

URL = "http://svc.test/items"
HOST = "http://svc.test:80"


def registry_of(session: ResilientSession) -> HostRegistry:
    """The registry the adapter mounted for URL reports to."""
    adapter = session.get_adapter(URL)
    assert isinstance(adapter, ResilientAdapter)
    return adapter.registry


def test_copy_is_a_second_handle_that_leaves_the_original_working(mock, session):
    """copy.copy(session) shares headers, cookies, adapters and per-host state, as a copy of
    a requests.Session shares them: calls through either show in health() of both, and the
    original's adapters still report to the original's registry."""
    mock.get(URL, status=503)
    mock.get(URL, status=200)
    session.get(URL)
    clone = copy.copy(session)
    for _ in range(2):
        mock.get(URL, status=200)
    assert session.get(URL).status_code == 200
    assert clone.get(URL).status_code == 200
    for handle in (session, clone):
        health = handle.health()[HOST]
        assert (health.calls, health.tries, health.retries) == (3, 4, 1)
        assert registry_of(handle) is session.registry
    assert clone.registry is session.registry
    assert (clone.headers, clone.cookies, clone.adapters) == (
        session.headers,
        session.cookies,
        session.adapters,
    )
    assert clone.config is session.config


def test_deepcopy_and_pickle_give_an_independent_session(mock):
    """copy.deepcopy, like pickling, gives a session with the same config and fresh per-host
    state; the original keeps its own."""
    session = ResilientSession(FAST)  # the system clock: a FakeClock holds a lock
    mock.get(URL, status=200)
    session.get(URL)
    for clone in (copy.deepcopy(session), pickle.loads(pickle.dumps(session))):  # noqa: S301
        assert clone.registry is not session.registry
        assert registry_of(clone) is clone.registry
        assert clone.config == session.config
        assert clone.health() == {}
    assert registry_of(session) is session.registry
    mock.get(URL, status=200)
    session.get(URL)
    assert session.health()[HOST].calls == 2


@pytest.mark.parametrize(
    "body",
    [memoryview(b"payload"), memoryview(bytearray(b"payload")), array.array("B", b"payload")],
    ids=["memoryview", "memoryview-of-bytearray", "array"],
)
def test_bytes_like_bodies_are_replayed(mock, session, body):
    """A memoryview (or another bytes-like body) is sent again whole on the retry."""
    mock.put(URL, status=503)
    mock.put(URL, status=200)
    response = session.put(URL, data=body)
    assert response.status_code == 200
    assert [bytes(call.request.body) for call in mock.calls] == [b"payload", b"payload"]


def test_stream_retried_response_that_falls_back_keeps_the_first_bytes(mock, session):
    """With stream=True a long 503 is read only to DRAIN_LIMIT before the retry; when the retry
    cannot connect, the caller gets that 503 with its first DRAIN_LIMIT bytes as content."""
    refused = requests.ConnectionError(
        requests.urllib3.exceptions.MaxRetryError(  # type: ignore[attr-defined]
            None,
            "/",
            requests.urllib3.exceptions.NewConnectionError(None, "refused"),  # type: ignore[attr-defined]
        )
    )
    big = b"e" * (DRAIN_LIMIT * 16)
    mock.get(URL, status=503, body=big)
    for _ in range(3):  # every retry left, each refused
        mock.get(URL, body=refused)
    response = session.get(URL, stream=True)
    assert response.status_code == 503
    assert response.content == big[:DRAIN_LIMIT]
    assert b"".join(response.iter_content(1024)) == big[:DRAIN_LIMIT]
    assert len(mock.calls) == 4


def test_stream_retried_short_body_is_kept_whole(mock, session):
    """A 503 body within DRAIN_LIMIT is read whole, so a fallback to it reads normally."""
    refused = requests.ConnectionError(
        requests.urllib3.exceptions.MaxRetryError(  # type: ignore[attr-defined]
            None,
            "/",
            requests.urllib3.exceptions.NewConnectionError(None, "refused"),  # type: ignore[attr-defined]
        )
    )
    mock.get(URL, status=503, body=b"busy")
    for _ in range(3):  # every retry left, each refused
        mock.get(URL, body=refused)
    assert session.get(URL, stream=True).content == b"busy"


def test_retried_responses_cookies_are_sent_and_kept(mock, session):
    """A Set-Cookie on a retried 503 goes out on the retry and lands in the session's jar;
    the caller's prepared request and per-call cookies are left alone."""
    mock.get(URL, status=503, headers={"Set-Cookie": "lb=node7; Path=/"})
    mock.get(URL, status=503, headers={"Set-Cookie": "zone=b; Path=/"})
    mock.get(URL, status=200, headers={"Set-Cookie": "lb=node9; Path=/"})
    response = session.get(URL, cookies={"mine": "1"})
    assert response.status_code == 200
    sent = [call.request.headers.get("Cookie") for call in mock.calls]
    assert sent == ["mine=1", "mine=1; lb=node7", "mine=1; lb=node7; zone=b"]
    assert session.cookies.get_dict() == {"lb": "node9", "zone": "b"}


def test_caller_prepared_request_keeps_its_cookie_header(mock, session):
    """session.send(prepared) carries the retried cookies on a copy, never on *prepared*."""
    mock.get(URL, status=503, headers={"Set-Cookie": "lb=node7; Path=/"})
    mock.get(URL, status=200)
    prepared = session.prepare_request(requests.Request("GET", URL, cookies={"mine": "1"}))
    session.send(prepared)
    assert prepared.headers["Cookie"] == "mine=1"
    assert [call.request.headers["Cookie"] for call in mock.calls] == ["mine=1", "mine=1; lb=node7"]
    assert session.cookies.get_dict() == {"lb": "node7"}


def test_explicit_deadline_replaces_configured_default(mock, clock):
    """deadline=10 with deadline.default 2 gives the call 10 s, not 2."""
    session = ResilientSession({"defaults": {"deadline": {"default": 2.0}}}, clock=clock)
    for _ in range(3):
        mock.get(URL, status=200)
    session.get(URL, deadline=10)
    session.get(URL)
    session.get(URL, deadline=0.5)
    sent = [call.request.headers["X-Request-Timeout-Ms"] for call in mock.calls]
    assert sent == ["10000", "2000", "500"]


def test_retried_cookies_reach_whichever_jar_the_session_holds(mock):
    """The cookies of retried responses land in session.cookies even after the jar is
    replaced, and in an unpickled session's own jar."""
    original = ResilientSession(FAST)  # the system clock: a FakeClock cannot be pickled
    original.cookies = requests.cookies.RequestsCookieJar()
    clone = pickle.loads(pickle.dumps(original))  # noqa: S301 - our own bytes
    for session in (original, clone):
        mock.get(URL, status=503, headers={"Set-Cookie": "lb=node7; Path=/"})
        mock.get(URL, status=200)
        session.get(URL, deadline=5.0)
    assert original.cookies.get_dict() == {"lb": "node7"}
    assert clone.cookies.get_dict() == {"lb": "node7"}
    assert clone.cookies is not original.cookies


def test_stream_response_kept_whole_when_the_budget_refuses_the_retry(mock, clock):
    """A long streamed 503 that the budget will not retry is the call's result: it is drained
    only once a retry is certain, so here the caller reads the whole body, as with requests."""
    session = ResilientSession(
        {"defaults": {"budget": {"max_tokens": 1, "ratio": 0, "min_per_second": 0}}}, clock=clock
    )
    big = b"e" * (DRAIN_LIMIT * 4)
    mock.get(URL, status=503, body=b"busy")
    mock.get(URL, status=200, body=b"ok")  # the one retry the single token buys
    mock.get(URL, status=503, body=big)
    assert session.get(URL).status_code == 200
    response = session.get(URL, stream=True)
    assert response.status_code == 503
    assert response.content == big
    assert len(mock.calls) == 3
    assert session.health()["http://svc.test:80"].budget_exhausted == 1
