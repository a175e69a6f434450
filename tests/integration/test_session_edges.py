"""What a requests user meets first, against real sockets: cookies, proxies, long error
bodies, impatient callers and bytes-like bodies."""

from __future__ import annotations

import time

import pytest
import requests
from requests.adapters import HTTPAdapter
from structlog.testing import capture_logs

from resilient_session import BreakerState, DeadlineExceeded
from resilient_session._transport.body import DRAIN_LIMIT
from resilient_session.testing.upstream import Reply, refused_url

pytestmark = pytest.mark.integration


def test_cookie_set_on_a_retried_response_is_sent_and_kept(upstream, make_session):
    """A 503 with Set-Cookie: lb=node7 then 200: the retry carries Cookie: lb=node7 and the
    session's jar has it afterwards."""
    upstream.script("/lb", Reply(503, headers={"Set-Cookie": "lb=node7; Path=/"}), Reply(200))
    session = make_session()

    response = session.get(upstream.url("/lb"))

    assert response.status_code == 200
    assert [hit.header("Cookie") for hit in upstream.received("/lb")] == [None, "lb=node7"]
    assert session.cookies["lb"] == "node7"


def test_post_through_a_refusing_proxy_is_retried_as_a_connect_failure(make_session):
    """A proxy that refuses the connection never saw the POST: every try is made, the call
    ends on max_attempts (not not_idempotent) and raises requests' ProxyError."""
    proxy = refused_url()
    session = make_session(retry={"max_attempts": 3})

    with capture_logs() as logs, pytest.raises(requests.exceptions.ProxyError):
        session.post("http://origin.test/orders", data=b"{}", proxies={"http": proxy})

    tries = [(e["decision"], e["reason"]) for e in logs if e["event"] == "http.try"]
    assert tries == [("retry", "transient"), ("retry", "transient"), ("give_up", "max_attempts")]


def test_long_error_body_is_not_read_to_the_end_before_a_streamed_retry(
    upstream, make_session, monkeypatch
):
    """stream=True, a 503 with an 8 MB body then 200: the call succeeds, at most DRAIN_LIMIT
    bytes of the 503 are read, and its connection is dropped rather than pooled."""
    big = b"e" * (8 * 1024 * 1024)
    upstream.script("/big", Reply(503, body=big), Reply(200, body=b"fine"))
    tries: list[requests.Response] = []
    send = HTTPAdapter.send

    def recording_send(self, request, *args, **kwargs):
        response = send(self, request, *args, **kwargs)
        tries.append(response)
        return response

    monkeypatch.setattr(HTTPAdapter, "send", recording_send)
    session = make_session()

    started = time.monotonic()
    response = session.get(upstream.url("/big"), stream=True)

    assert (response.status_code, response.content) == (200, b"fine")
    assert time.monotonic() - started < 5.0
    drained = tries[0]
    assert drained.status_code == 503
    assert drained.raw.tell() <= DRAIN_LIMIT + 1  # bytes taken off the wire
    assert len(drained.content) == DRAIN_LIMIT
    assert upstream.hits("/big") == 2
    assert upstream.connections == 2  # the 503's connection was closed, not reused


def test_impatient_callers_do_not_open_the_breaker(upstream, make_session):
    """Six calls with deadline=0.1 to a healthy host answering in 0.2 s each end in
    DeadlineExceeded; the breaker stays closed and a patient call succeeds on its first try."""
    upstream.script("/slow", Reply(200, body=b"ok", delay=0.2))
    session = make_session()
    url = upstream.url("/slow")

    for _ in range(6):
        with pytest.raises(DeadlineExceeded):
            session.get(url, deadline=0.1)

    health = session.health()[upstream.base_url]
    assert (health.breaker, health.failures) == (BreakerState.CLOSED, 0)
    response = session.get(url)
    assert (response.status_code, response.text) == (200, "ok")
    assert upstream.hits("/slow") == 7
    assert session.health()[upstream.base_url].tries == 7


def test_memoryview_body_is_sent_again_on_the_retry(upstream, make_session):
    """A PUT of a memoryview answered 503 then 200 reaches the upstream twice, whole."""
    upstream.script("/put", Reply(503), Reply(200))

    response = make_session().put(upstream.url("/put"), data=memoryview(b"payload"))

    assert response.status_code == 200
    assert [hit.body for hit in upstream.received("/put")] == [b"payload", b"payload"]
