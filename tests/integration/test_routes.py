"""One bad endpoint and a healthy one on the same real loopback host: without routes the bad
one's failures throttle the healthy one; with a route, each has state of its own."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .conftest import FAST_RETRY

pytestmark = pytest.mark.integration

ROUNDS = 80


def _bad_and_good(upstream: FlakyUpstream, routes: dict[str, Any] | None) -> dict[str, Any]:
    """80 rounds of one call to /bad (always 503) and one to /good (always 200) on one
    session: what each got, and the session's health."""
    upstream.script("/bad", Reply(503))
    upstream.script("/good", Reply(200, body=b"fine"))
    config: dict[str, Any] = {"defaults": {"retry": FAST_RETRY}}
    if routes is not None:
        config["hosts"] = {"127.0.0.1": {"routes": routes}}
    refused = {"/bad": 0, "/good": 0}
    good = 0
    with ResilientSession(config) as session:
        for _ in range(ROUNDS):
            for path in ("/bad", "/good"):
                try:
                    status = session.get(upstream.url(path), timeout=5).status_code
                except CircuitOpenError:  # the breaker's, the throttle's or the limit's
                    refused[path] += 1
                    continue
                good += path == "/good" and status == 200
        health = session.health()
    return {"refused": refused, "good": good, "health": health}


def test_without_routes_the_bad_endpoint_throttles_the_good_one(upstream):
    """The figure routes exist for: /bad's 503s fill the host's throttle window, and calls to
    a healthy /good on the same host are refused (8 to 43 of 80, 25 on median, in 25 runs on
    this machine)."""
    seen = _bad_and_good(upstream, None)
    assert seen["refused"]["/good"] >= 5
    assert seen["good"] + seen["refused"]["/good"] == ROUNDS
    assert upstream.hits("/good") == seen["good"]
    assert list(seen["health"]) == [f"http://127.0.0.1:{upstream.port}"]


@pytest.mark.parametrize(
    "routes",
    [{"/bad/*": {}}, {"/bad/*": {}, "/good/*": {}}],
    ids=["bad-only", "both"],
)
def test_with_a_route_the_good_endpoint_is_never_refused(upstream, routes):
    """With a route for /bad/* (or one each), every call to /good goes out and gets its 200,
    while /bad's own guards still refuse most of its calls."""
    seen = _bad_and_good(upstream, routes)
    host = f"http://127.0.0.1:{upstream.port}"
    assert (seen["refused"]["/good"], seen["good"], upstream.hits("/good")) == (0, ROUNDS, ROUNDS)
    bad = seen["health"][host + "/bad/*"]
    assert (bad.route, bad.refused) == ("/bad/*", seen["refused"]["/bad"])
    assert bad.refused >= ROUNDS // 2
    good_key = host + "/good/*" if "/good/*" in routes else host
    good = seen["health"][good_key]
    assert (good.calls, good.tries, good.refused, good.failures) == (ROUNDS, ROUNDS, 0, 0)
    assert good.route == ("/good/*" if "/good/*" in routes else None)


def test_events_and_health_name_the_route_of_each_call(upstream):
    """Over a real upstream, http.try names the route each try ran under (null outside every
    route), and health() lists the host and each route used, with its counts."""
    upstream.script("/v1/payments/7", Reply(503), Reply(200))
    config = {
        "defaults": {"retry": FAST_RETRY},
        "hosts": {"127.0.0.1": {"routes": {"/v1/payments/*": {"retry": {"max_attempts": 2}}}}},
    }
    host = f"http://127.0.0.1:{upstream.port}"
    with ResilientSession(config) as session, capture_logs() as logs:
        assert session.get(upstream.url("/v1/payments/7")).status_code == 200
        assert session.get(upstream.url("/v1/search")).status_code == 200
        health = session.health()
    tries = [(e["host"], e["route"], e["status"]) for e in logs if e["event"] == "http.try"]
    assert tries == [
        (host, "/v1/payments/*", 503),
        (host, "/v1/payments/*", 200),
        (host, None, 200),
    ]
    assert {key: (h.route, h.calls, h.tries) for key, h in health.items()} == {
        host: (None, 1, 1),
        host + "/v1/payments/*": ("/v1/payments/*", 1, 2),
    }
