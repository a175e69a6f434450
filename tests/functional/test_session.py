"""ResilientSession through `responses`: every try is seen, and requests' behaviour is kept."""

from __future__ import annotations

import inspect
import io
import pickle

import pytest
import requests
import responses

from resilient_session import (
    CircuitOpenError,
    DeadlineExceeded,
    ResilientAdapter,
    ResilientSession,
    deadline,
)
from resilient_session._state.registry import HostRegistry
from resilient_session._transport.owned import take_owned
from resilient_session.config import load
from tests.functional.conftest import FAST

URL = "http://svc.test/items"


def test_every_try_reaches_the_transport(mock, session):
    """503, 503, 200: responses sees three requests and the caller gets the 200."""
    for status in (503, 503, 200):
        mock.get(URL, status=status)
    response = session.get(URL)
    assert (response.status_code, len(mock.calls)) == (200, 3)


def test_final_failure_is_what_plain_requests_returns(mock, session):
    """When tries run out the last 503 is returned as a response, not raised."""
    for _ in range(4):
        mock.get(URL, status=503, body="busy")
    response = session.get(URL)
    assert (response.status_code, response.text, len(mock.calls)) == (503, "busy", 4)


def test_final_exception_keeps_requests_type(mock, session):
    """When every try fails to connect, requests.ConnectionError is raised as usual."""
    for _ in range(4):
        mock.get(URL, body=requests.ConnectionError("down"))
    with pytest.raises(requests.ConnectionError, match="down"):
        session.get(URL)
    assert len(mock.calls) == 4


def test_callers_request_not_mutated(mock, session):
    """The deadline header goes on per-try copies; the caller's prepared request is unchanged."""
    mock.get(URL, status=503)
    mock.get(URL, status=200)
    prepared = session.prepare_request(requests.Request("GET", URL, headers={"X-A": "1"}))
    before = dict(prepared.headers)
    with deadline(5.0, clock=session._clock):
        session.send(prepared)
    assert dict(prepared.headers) == before
    sent = [call.request.headers["X-Request-Timeout-Ms"] for call in mock.calls]
    assert sent[0] == "5000"
    assert int(sent[1]) < 5000


def test_a_request_the_caller_prepared_is_never_written_to(mock, session):
    """session.send(prepared): the caller holds *prepared*, so each try's X-Request-Attempt
    goes on a copy, with or without a deadline."""
    mock.get(URL, status=503)
    mock.get(URL, status=200)
    prepared = session.prepare_request(requests.Request("GET", URL))
    before = dict(prepared.headers)
    session.send(prepared)
    assert dict(prepared.headers) == before
    sent = [call.request.headers["X-Request-Attempt"] for call in mock.calls]
    assert sent == ["1; max=4", "2; max=4"]
    assert all(call.request is not prepared for call in mock.calls)


def test_the_first_try_of_a_call_carries_its_header_in_the_request_made_for_it(mock, session):
    """session.get: the request requests prepared for the call is the call's alone, so the
    first try writes its header into it; a retry sends a copy and leaves the first as sent."""
    mock.get(URL, status=503)
    mock.get(URL, status=200)
    response = session.get(URL)
    first, second = (call.request for call in mock.calls)
    assert first.headers["X-Request-Attempt"] == "1; max=4"
    assert second.headers["X-Request-Attempt"] == "2; max=4"
    assert first is not second
    assert response.request is second
    # The mark that the request is the call's alone ends with its first try: a request the
    # caller takes from a response and sends again is theirs, and goes out as a copy.
    assert take_owned(first) is False


def test_a_response_request_sent_again_is_not_written_to(mock, session):
    """session.send(response.request): the request of an earlier call, now the caller's."""
    mock.get(URL, status=200)
    mock.get(URL, status=503)
    mock.get(URL, status=200)
    earlier = session.get(URL).request
    before = dict(earlier.headers)
    session.send(earlier)
    assert dict(earlier.headers) == before
    assert [call.request.headers["X-Request-Attempt"] for call in mock.calls] == [
        "1; max=4",
        "1; max=4",
        "2; max=4",
    ]
    assert all(call.request is not earlier for call in mock.calls[1:])


class _RequestOfItsOwn(requests.Session):
    calls = 0

    def request(self, method, url, **kwargs):  # type: ignore[override]
        _RequestOfItsOwn.calls += 1
        return super().request(method, url, **kwargs)


def test_a_session_class_with_a_request_of_its_own_after_this_one_still_runs():
    """ResilientSession before another Session subclass with its own request: that request
    runs on every call, and the tries still carry X-Request-Attempt."""

    class Both(ResilientSession, _RequestOfItsOwn):  # type: ignore[misc]
        pass

    with responses.RequestsMock() as mock, Both(FAST) as session:
        mock.get(URL, status=200)
        session.get(URL)
        assert _RequestOfItsOwn.calls == 1
        assert mock.calls[0].request.headers["X-Request-Attempt"] == "1; max=4"
    assert Both._next_request_is_requests is False
    assert ResilientSession._next_request_is_requests is True


def test_a_patched_requests_session_request_is_followed(mock, session, monkeypatch):
    """Instrumentation that wraps requests.Session.request after import still sees every
    call: the steps run here only while it is requests' own."""
    seen: list[str] = []
    original = requests.Session.request

    def wrapped(self, method, url, *args, **kwargs):
        seen.append(url)
        return original(self, method, url, *args, **kwargs)

    monkeypatch.setattr(requests.Session, "request", wrapped)
    mock.get(URL, status=200)
    assert session.get(URL).status_code == 200
    assert seen == [URL]


def test_deadline_kwarg(mock, session, clock):
    """deadline= bounds the whole call and raises DeadlineExceeded when no response is at hand."""
    mock.get(URL, body=requests.ReadTimeout("slow"))
    with pytest.raises(DeadlineExceeded) as raised:
        session.get(URL, deadline=0.5)
    assert isinstance(raised.value, requests.Timeout)
    assert len(mock.calls) == 1


def test_request_takes_requests_parameters_in_requests_order():
    """request() spells out requests' parameters (and passes them on by keyword): the same
    names, order and defaults, plus deadline= and resilience= last. A requests release that
    changes them fails here first."""
    ours = list(inspect.signature(ResilientSession.request).parameters.values())
    theirs = list(inspect.signature(requests.Session.request).parameters.values())
    assert [(p.name, p.default) for p in ours[:-2]] == [(p.name, p.default) for p in theirs]
    assert [p.name for p in ours[-2:]] == ["deadline", "resilience"]


@pytest.mark.parametrize("verb", ["get", "options", "head", "post", "put", "patch", "delete"])
def test_every_verb_takes_deadline_and_requests_positionals(mock, session, verb):
    """deadline= reaches the call through requests' own verbs, and what requests takes by
    position still lands where requests puts it."""
    mock.add(verb.upper(), URL, status=200)
    mock.add(verb.upper(), URL, status=200)
    send = getattr(session, verb)
    send(URL, deadline=1.5)
    session.request(verb.upper(), URL, {"page": "2"}, b"body", {"X-Mine": "1"})
    first, second = (call.request for call in mock.calls)
    assert first.headers["X-Request-Timeout-Ms"] == "1500"
    assert "X-Request-Timeout-Ms" not in second.headers
    assert (second.url, second.body, second.headers["X-Mine"]) == (URL + "?page=2", b"body", "1")


def test_deadline_none_switches_off_config_default(mock, clock):
    """deadline=None means no deadline, even when the config sets a default."""
    session = ResilientSession({"defaults": {"deadline": {"default": 2.0}}}, clock=clock)
    mock.get(URL, status=200)
    mock.get(URL, status=200)
    session.get(URL)
    session.get(URL, deadline=None)
    assert mock.calls[0].request.headers["X-Request-Timeout-Ms"] == "2000"
    assert "X-Request-Timeout-Ms" not in mock.calls[1].request.headers


def test_retries_never_appear_in_history_and_hooks_run_once(mock, session):
    """A redirect then 503, 200: history holds the one redirect; the response hook runs twice
    (once per hop), never once per try."""
    mock.get(URL, status=302, headers={"Location": "http://svc.test/moved"})
    mock.get("http://svc.test/moved", status=503)
    mock.get("http://svc.test/moved", status=200)
    seen: list[int] = []
    response = session.get(URL, hooks={"response": lambda r, **kw: seen.append(r.status_code)})
    assert response.status_code == 200
    assert [r.status_code for r in response.history] == [302]
    assert seen == [302, 200]


def test_post_sent_once_unless_idempotency_key(mock, session):
    """POST on 503 is sent once; with Idempotency-Key it is retried."""
    mock.post(URL, status=503)
    assert session.post(URL, json={"a": 1}).status_code == 503
    assert len(mock.calls) == 1
    mock.post(URL, status=503)
    mock.post(URL, status=201)
    response = session.post(URL, json={"a": 1}, headers={"Idempotency-Key": "abc"})
    assert (response.status_code, len(mock.calls)) == (201, 3)
    assert mock.calls[1].request.body == mock.calls[2].request.body == b'{"a": 1}'


def test_file_body_sent_once(mock, session):
    """A PUT whose body is a file object is sent once even on 503."""
    mock.put(URL, status=503)
    assert session.put(URL, data=io.BytesIO(b"payload")).status_code == 503
    assert len(mock.calls) == 1


def test_multipart_body_is_replayable(mock, session):
    """files= is encoded to bytes, so a PUT with it is retried with the same body."""
    mock.put(URL, status=503)
    mock.put(URL, status=200)
    assert session.put(URL, files={"f": ("a.txt", b"hello")}).status_code == 200
    assert mock.calls[0].request.body == mock.calls[1].request.body


def test_adapter_send_directly(mock, clock):
    """adapter.send called directly, as digest auth does, retries like a call via the session."""
    adapter = ResilientAdapter(FAST, clock=clock)
    mock.get(URL, status=502)
    mock.get(URL, status=200)
    prepared = requests.Request("GET", URL).prepare()
    assert adapter.send(prepared).status_code == 200
    assert len(mock.calls) == 2


def test_adapters_are_httpadapters_on_both_schemes(session):
    """Both default prefixes hold ResilientAdapter, a real HTTPAdapter sharing one registry."""
    adapters = [session.get_adapter("http://a.test"), session.get_adapter("https://a.test")]
    assert all(isinstance(a, requests.adapters.HTTPAdapter) for a in adapters)
    assert all(isinstance(a, ResilientAdapter) for a in adapters)
    assert adapters[0] is not adapters[1]
    assert adapters[0].registry is adapters[1].registry is session.registry


def test_mount_prefix_still_wins(mock, session, clock):
    """A more specific mount takes over its prefix, as in requests, and its tries go through
    the session's pipeline: 503, 503, 200 gives the 200 after two waits."""
    plain = requests.adapters.HTTPAdapter()
    session.mount("http://svc.test/raw", plain)
    assert session.get_adapter("http://svc.test/raw/x") is plain
    assert session.adapters["http://svc.test/raw"] is plain
    for status in (503, 503, 200):
        mock.get("http://svc.test/raw/x", status=status)
    assert session.get("http://svc.test/raw/x").status_code == 200
    assert (len(mock.calls), len(clock.sleeps)) == (3, 2)


def test_pickled_session_keeps_config_and_starts_fresh(mock, clock):
    """A pickled session keeps its config, gets fresh breakers, and still sends."""
    session = ResilientSession({"defaults": {"breaker": {"failure_threshold": 1}}})
    mock.get(URL, status=500)
    session.get(URL)
    with pytest.raises(CircuitOpenError):
        session.get(URL)
    clone = pickle.loads(pickle.dumps(session))  # noqa: S301 - our own bytes
    assert clone.config == session.config
    assert clone.registry is not session.registry
    assert clone.get_adapter("http://a.test").registry is clone.registry
    assert clone.get_adapter("https://a.test").registry is clone.registry
    mock.get(URL, status=200)
    assert clone.get(URL).status_code == 200


def test_with_block_closes_adapters(session):
    """`with ResilientSession()` closes the pools on exit, as requests.Session does."""
    with session as entered:
        assert entered is session
        adapter = session.get_adapter("http://a.test")
        pool = adapter.poolmanager.connection_from_url("http://a.test")
        assert len(adapter.poolmanager.pools) == 1
        assert pool is not None
    assert len(adapter.poolmanager.pools) == 0


def test_sessions_share_state_only_when_told(mock, clock):
    """Two sessions have separate breakers unless handed the same registry."""
    config = {"defaults": {"breaker": {"failure_threshold": 1}}}
    first = ResilientSession(config, clock=clock)
    second = ResilientSession(config, clock=clock)
    mock.get(URL, status=500)
    mock.get(URL, status=200)
    first.get(URL)
    assert second.get(URL).status_code == 200
    shared = HostRegistry(first.config, clock=clock)
    a = ResilientSession(registry=shared, clock=clock)
    b = ResilientSession(registry=shared, clock=clock)
    mock.get(URL, status=500)
    a.get(URL)
    with pytest.raises(CircuitOpenError):
        b.get(URL)


def test_a_registry_handed_in_brings_its_clock_to_every_adapter(mock, clock):
    """A session given a registry, and an adapter mounted on it as docs/migration.md shows,
    wait their retries on the registry's clock, never on real time."""
    session = ResilientSession(registry=HostRegistry(load(FAST), clock=clock))
    for status in (503, 200, 503, 200):
        mock.get(URL, status=status)
    assert session.get(URL).status_code == 200
    session.mount("http://", ResilientAdapter(registry=session.registry, pool_maxsize=4))
    assert session.get(URL).status_code == 200
    assert len(clock.sleeps) == 2
    assert all(0.0 <= wait <= 0.1 for wait in clock.sleeps)


def test_config_and_registry_together_rejected(clock):
    """Passing both config and registry is ambiguous and refused."""
    with pytest.raises(ValueError, match="config or registry"):
        ResilientSession({}, registry=HostRegistry())


def test_stream_true_retried_response_drained_final_streams(mock, session):
    """With stream=True the retried 503 is drained; the final 200 is read by the caller."""
    mock.get(URL, status=503, body="no")
    mock.get(URL, status=200, body="x" * 100_000)
    response = session.get(URL, stream=True)
    assert sum(len(chunk) for chunk in response.iter_content(8192)) == 100_000


def test_default_timeout_only_when_caller_gives_none(session, monkeypatch):
    """None gets the configured (connect, read); the caller's own timeout passes unchanged."""
    sent: list[object] = []

    def fake_send(self, request, **kwargs):
        sent.append(kwargs["timeout"])
        response = requests.Response()
        response.status_code = 200
        response._content = b""
        response.request = request
        return response

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", fake_send)
    session.get(URL)
    session.get(URL, timeout=3)
    session.get(URL, timeout=(1, 2))
    assert sent == [(5.0, 30.0), 3, (1, 2)]


def test_health_after_calls(mock, session):
    """session.health() shows the host's breaker, calls, tries and retries."""
    mock.get(URL, status=503)
    mock.get(URL, status=200)
    session.get(URL)
    health = session.health()["http://svc.test:80"]
    assert (health.breaker.value, health.calls, health.tries, health.retries) == ("closed", 1, 2, 1)
