"""What a requests user meets first, against real sockets: cookies, proxies, long error
bodies, impatient callers and bytes-like bodies."""

from __future__ import annotations

import pytest
import requests
from structlog.testing import capture_logs

from resilient_session import BreakerState, DeadlineExceeded
from resilient_session.upstream import Reply, refused_url

pytestmark = pytest.mark.integration


def test_post_through_a_refusing_proxy_is_retried_as_a_connect_failure(make_session):
    """A proxy that refuses the connection never saw the POST: every try is made, the call
    ends on max_attempts (not not_idempotent) and raises requests' ProxyError."""
    proxy = refused_url()
    session = make_session(retry={"max_attempts": 3})

    with capture_logs() as logs, pytest.raises(requests.exceptions.ProxyError):
        session.post("http://origin.test/orders", data=b"{}", proxies={"http": proxy})

    tries = [(e["decision"], e["reason"]) for e in logs if e["event"] == "http.try"]
    assert tries == [("retry", "transient"), ("retry", "transient"), ("give_up", "max_attempts")]


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
