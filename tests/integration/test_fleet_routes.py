"""Routes on the redis backend: a route's state is kept under keys of its own, shared by every
worker, and its breaker opens across the fleet while the host's stays closed."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import redis

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session.testing.upstream import Reply

from .fleet_calls import THRESHOLD, fleet_config, host_key, wait_until

pytestmark = pytest.mark.integration

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text()
)


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


def test_a_routes_values_no_worker_wrote_are_corrected_and_named_by_route(
    redis_server, key_prefix, upstream, logs
):
    """Tokens out of range in a route's budget key are clamped, and the state.corrected event
    names the host and the route, valid against docs/events.schema.json."""
    config = fleet_config(key_prefix, url=redis_server.url, timeout_ms=500)
    config["defaults"]["budget"] = {"ratio": 0.0, "min_per_second": 0.0, "max_tokens": 10}
    config["hosts"] = {"127.0.0.1": {"routes": {"/r/*": {}}}}
    host = host_key(upstream)
    route = host + "/r/*"
    admin = redis.Redis.from_url(redis_server.url)
    with ResilientSession(config) as session:
        assert session.get(upstream.url("/r/1")).status_code == 200
        budget = f"{key_prefix}{route}:budget"
        wait_until(lambda: admin.exists(budget) == 1)
        admin.hset(budget, mapping={"t": 1e9})
        wait_until(lambda: float(admin.hget(budget, "t") or -1) == 10.0)
        wait_until(lambda: any(e["event"] == "state.corrected" for e in logs))
    admin.close()
    found = [e for e in logs if e["event"] == "state.corrected"]
    assert [(e["host"], e.get("route"), e["fields"]) for e in found] == [(host, "/r/*", "budget")]
    event = {k: v for k, v in found[0].items() if k != "log_level"}
    jsonschema.validate({**event, "level": "warning", "timestamp": "2026-01-05T10:00:07Z"}, SCHEMA)
