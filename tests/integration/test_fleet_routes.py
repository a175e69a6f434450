"""Routes on the redis backend: a route's state is kept under keys of its own, shared by every
worker, and its breaker opens across the fleet while the host's stays closed."""

from __future__ import annotations

import pytest
import redis

from resilient_session import CircuitOpenError
from resilient_session.testing.upstream import Reply

from .fleet_calls import THRESHOLD, fleet_config, host_key, wait_until

pytestmark = pytest.mark.integration


def test_a_routes_keys_carry_the_route_and_its_opening_reaches_every_worker(
    redis_server, key_prefix, upstream, fleet_sessions
):
    """One worker's failures on /bad/* open that route's breaker for the other worker too,
    through keys named by the host key with the route after it; /good, on the host's own
    state and keys, stays closed and answered in both."""
    upstream.script("/bad/1", Reply(503))
    config = fleet_config(key_prefix, url=redis_server.url)
    config["hosts"] = {"127.0.0.1": {"routes": {"/bad/*": {}}}}
    failing, other = fleet_sessions(2, config)
    host = host_key(upstream)
    route = host + "/bad/*"
    for session in (failing, other):
        assert session.get(upstream.url("/good")).status_code == 200
        assert session.get(upstream.url("/bad/1")).status_code == 503
    for _ in range(THRESHOLD):
        try:
            failing.get(upstream.url("/bad/1"))
        except CircuitOpenError:
            break
    wait_until(lambda: failing.health()[route].breaker.value == "open", timeout=2.0)
    wait_until(lambda: other.health()[route].breaker.value == "open", timeout=2.0)
    hits = upstream.hits("/bad/1")
    with pytest.raises(CircuitOpenError, match=r"\(route /bad/\*\) is open"):
        other.get(upstream.url("/bad/2"))
    assert other.get(upstream.url("/good")).status_code == 200
    assert (upstream.hits("/bad/1"), upstream.hits("/bad/2"), upstream.hits("/good")) == (
        hits,
        0,
        3,
    )
    for session in (failing, other):
        health = session.health()
        assert (health[host].breaker.value, health[host].route) == ("closed", None)
        assert (health[route].route, health[route].state_backend) == ("/bad/*", "redis")

    client = redis.Redis.from_url(redis_server.url)
    keys = sorted(key.decode() for key in client.scan_iter(match=key_prefix + "*"))
    assert keys == sorted(
        key_prefix + name + suffix
        for name in (host, route)
        for suffix in (":breaker", ":budget", ":workers")
    )
    states = [client.hget(key_prefix + name + ":breaker", "s") for name in (host, route)]
    assert states == [b"0", b"1"]  # closed, open
