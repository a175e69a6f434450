"""One HostRegistry for a ResilientSession and an httpx client: one breaker, budget and
throttle per host, whichever library a call goes out on (loopback upstream)."""

from __future__ import annotations

import pytest

from resilient_session import HostRegistry, ResilientSession
from resilient_session.config import load
from resilient_session.httpx import CircuitOpenError, ResilientClient
from resilient_session.testing.faults import Reply
from resilient_session.testing.upstream import FlakyUpstream

pytestmark = pytest.mark.httpx


def test_a_breaker_the_session_opened_refuses_the_httpx_clients_call(upstream: FlakyUpstream):
    upstream.script("/down", Reply(503))
    config = load({"defaults": {"retry": {"max_attempts": 1}, "breaker": {"failure_threshold": 3}}})
    registry = HostRegistry(config)
    session = ResilientSession(registry=registry)
    with ResilientClient(registry=registry) as client:
        assert [session.get(upstream.url("/down")).status_code for _ in range(3)] == [503] * 3
        with pytest.raises(CircuitOpenError, match="is open") as refused:
            client.get(upstream.url("/down"))
        assert upstream.hits("/down") == 3
        assert client.registry.for_url(upstream.url("/")) is session.registry.for_url(
            upstream.url("/")
        )
    assert refused.value.request.url == upstream.url("/down")
    session.close()


def test_the_httpx_clients_failures_open_the_sessions_breaker(upstream: FlakyUpstream):
    upstream.script("/down", Reply(503))
    config = load({"defaults": {"retry": {"max_attempts": 1}, "breaker": {"failure_threshold": 2}}})
    registry = HostRegistry(config)
    with ResilientClient(registry=registry) as client:
        assert [client.get(upstream.url("/down")).status_code for _ in range(2)] == [503, 503]
    session = ResilientSession(registry=registry)
    from resilient_session import CircuitOpenError as RequestsCircuitOpen

    with pytest.raises(RequestsCircuitOpen):
        session.get(upstream.url("/down"))
    assert upstream.hits("/down") == 2
    session.close()


def test_a_reset_mid_body_is_retried_by_the_client(upstream: FlakyUpstream):
    from resilient_session.testing.faults import ResetMidBody

    upstream.script("/body", ResetMidBody(), Reply(200, body=b"whole"))
    with ResilientClient({"defaults": {"retry": {"max_attempts": 3}}}) as client:
        response = client.get(upstream.url("/body"))
    assert (response.status_code, response.content, upstream.hits("/body")) == (200, b"whole", 2)
