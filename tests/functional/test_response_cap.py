"""retry.max_response_bytes through the whole pipeline, on `responses` and the fake clock: a
body over the cap is judged by its status (a 503 is retried), ends the call with
ResponseTooLarge when it is the last, and costs nothing where no host is capped."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError

from resilient_session import ResilientAdapter, ResilientSession, ResponseTooLarge
from resilient_session.config import load
from resilient_session.testing import FakeClock

URL = "http://svc.test/items"
HOST = "http://svc.test:80"
CAP = 100
BIG = b"e" * (CAP + 1)


def capped_session(clock: FakeClock, **retry: Any) -> ResilientSession:
    retry = {"backoff_base": 0.05, "backoff_cap": 0.1, "max_response_bytes": CAP, **retry}
    return ResilientSession({"defaults": {"retry": retry}}, clock=clock)


def tries(logs: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (e["status"], e["error"], e["decision"], e["reason"])
        for e in logs
        if e["event"] == "http.try"
    ]


def test_error_body_over_the_cap_is_retried_by_its_status(mock, clock, logs):
    """A 503 whose body is over the cap is an overload like any 503: retried after its
    Retry-After, and the 200 after it is the call's result."""
    mock.get(URL, status=503, body=BIG, headers={"Retry-After": "2"})
    mock.get(URL, status=200, body=b"ok")

    response = capped_session(clock).get(URL)

    assert (response.status_code, response.content) == (200, b"ok")
    assert tries(logs) == [
        (503, "ResponseTooLarge", "retry", "overload"),
        (200, None, "success", "ok"),
    ]
    assert clock.sleeps == [2.0]


def test_success_over_the_cap_ends_the_call_at_once(mock, clock, logs):
    """A 200 over the cap is not tried again (the same body would come back): the call
    raises ResponseTooLarge, and the breaker counts the host's answer as a success."""
    mock.get(URL, status=200, body=BIG)
    session = capped_session(clock)

    with pytest.raises(ResponseTooLarge) as raised:
        session.get(URL)

    assert raised.value.response is not None
    assert raised.value.response.status_code == 200
    assert tries(logs) == [(200, "ResponseTooLarge", "success", "ok")]
    health = session.health()[HOST]
    assert (health.tries, health.failures, health.retries) == (1, 0, 0)


def test_last_try_over_the_cap_raises(mock, clock, logs):
    """Every try a 503 over the cap: each is retried, and the last ends the call with
    ResponseTooLarge rather than a 503 with a cut body."""
    for _ in range(3):
        mock.get(URL, status=503, body=BIG)

    with pytest.raises(ResponseTooLarge):
        capped_session(clock, max_attempts=3).get(URL)

    assert [t[2:] for t in tries(logs)] == [
        ("retry", "overload"),
        ("retry", "overload"),
        ("give_up", "max_attempts"),
    ]


def test_a_retry_that_cannot_connect_falls_back_to_the_too_large_answer(mock, clock):
    """A 503 over the cap, then retries refused at connect: the caller gets what the last try
    that reached the host got, ResponseTooLarge."""
    refused = requests.ConnectionError(MaxRetryError(None, "/", NewConnectionError(None, "no")))  # type: ignore[arg-type]
    mock.get(URL, status=503, body=BIG)
    for _ in range(3):
        mock.get(URL, body=refused)

    with pytest.raises(ResponseTooLarge):
        capped_session(clock).get(URL)


def test_streamed_body_over_the_cap_raises_as_it_is_read(mock, clock):
    """stream=True: the call returns the response; reading it raises ResponseTooLarge once
    the cap is crossed, after handing out the bytes within it."""
    mock.get(URL, status=200, body=BIG)
    response = capped_session(clock).get(URL, stream=True)
    handed: list[bytes] = []

    with pytest.raises(ResponseTooLarge):
        handed.extend(response.iter_content(30))

    assert b"".join(handed) == BIG[:CAP]


def test_body_at_the_cap_is_returned(mock, clock):
    """A body of exactly the cap is the call's result, streamed or not."""
    mock.get(URL, body=BIG[:CAP])
    mock.get(URL, body=BIG[:CAP])
    session = capped_session(clock)

    assert session.get(URL).content == BIG[:CAP]
    assert session.get(URL, stream=True).content == BIG[:CAP]


def test_only_the_hosts_configured_are_capped(mock, clock):
    """A cap on one host entry leaves the others reading whole bodies."""
    session = ResilientSession(
        {"hosts": {"svc.test": {"retry": {"max_response_bytes": CAP}}}}, clock=clock
    )
    mock.get(URL, body=BIG)
    mock.get("http://other.test/items", body=BIG)

    with pytest.raises(ResponseTooLarge):
        session.get(URL)
    assert session.get("http://other.test/items").content == BIG


def test_an_adapter_builds_capped_responses_only_when_a_host_is_capped():
    """With every cap null the adapter keeps requests' own build_response (no call pays for
    the cap); a cap anywhere gives it the capped one, a registry attached later decides
    afresh, and an unpickled adapter keeps its config's choice."""
    plain = ResilientAdapter()
    capped = ResilientAdapter({"hosts": {"a.test": {"retry": {"max_response_bytes": 1}}}})

    assert "build_response" not in vars(plain)
    assert "build_response" in vars(capped)
    capped.attach(plain.registry)
    assert "build_response" not in vars(capped)
    plain.attach(ResilientAdapter({"defaults": {"retry": {"max_response_bytes": 1}}}).registry)
    assert "build_response" in vars(plain)
    clone = pickle.loads(pickle.dumps(plain))  # noqa: S301 - our own bytes
    assert "build_response" in vars(clone)
    assert load({"defaults": {"retry": {"max_response_bytes": 1}}}) == clone.registry.config
