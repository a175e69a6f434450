"""Fleet state over TLS (``rediss://``) on a real redis-server that speaks TLS only and asks
every client for a certificate: with the right CA and a client certificate the fleet is
shared; with a CA that did not sign the server's certificate, or no client certificate, the
worker degrades to its own state, and no call fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from devservers.redis_tls import TlsRedisServer

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session._state.fleet.keys import host_keys
from resilient_session.errors import ConfigError
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .fleet_calls import (
    THRESHOLD,
    fail_until_all_fail_fast,
    fleet_config,
    host_key,
    state_events,
    wait_until,
)

pytestmark = pytest.mark.integration

Sessions = Callable[[int, dict[str, Any]], list[ResilientSession]]


def _config(server: TlsRedisServer, prefix: str, **tls: str | None) -> dict[str, Any]:
    made = server.certificates
    chosen: dict[str, str | None] = {
        "ssl_ca_certs": made.ca,
        "ssl_certfile": made.client_cert,
        "ssl_keyfile": made.client_key,
        **tls,
    }
    return fleet_config(prefix, url=server.url, **{k: v for k, v in chosen.items() if v})


def test_the_fleet_is_shared_over_tls_with_the_ca_and_a_client_certificate(
    tls_redis: TlsRedisServer,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """Three workers on rediss:// with the server's CA and a client certificate send at most
    2 x failure_threshold tries to a host that answers 503 before every one fails fast;
    the opening is on the server, and nothing degrades."""
    upstream.script("/down", Reply(503))
    fleet = fleet_sessions(3, _config(tls_redis, key_prefix))
    breaker, _, _, workers = host_keys(key_prefix, host_key(upstream))
    # Each worker's first sync shakes hands: done before the host goes down.
    for session in fleet:
        assert session.get(upstream.url("/")).status_code == 200
    wait_until(lambda: tls_redis.command("ZCARD", workers) == 3)
    fail_until_all_fail_fast(fleet, upstream.url("/down"))
    assert THRESHOLD <= upstream.hits("/down") <= 2 * THRESHOLD
    assert tls_redis.command("HGET", breaker, "s") == "1"
    assert state_events(logs) == []


@pytest.mark.parametrize(
    "refused",
    ["a CA that did not sign the server's certificate", "no client certificate"],
)
def test_a_tls_handshake_refused_degrades_without_failing_a_call(
    refused: str,
    tls_redis: TlsRedisServer,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """Every sync fails in the handshake: the worker serves every call, logs one
    state.degraded (ConnectionError), and its breaker opens on its own failures."""
    tls: dict[str, str | None] = {"ssl_certfile": None, "ssl_keyfile": None}
    if refused.startswith("a CA"):
        tls = {"ssl_ca_certs": tls_redis.certificates.other_ca}
    (session,) = fleet_sessions(1, _config(tls_redis, key_prefix, **tls))
    key = host_key(upstream)
    assert session.get(upstream.url("/")).status_code == 200
    wait_until(lambda: session.health()[key].state_degraded, timeout=5.0)
    upstream.script("/down", Reply(503))
    for _ in range(THRESHOLD):
        assert session.get(upstream.url("/down")).status_code == 503
    with pytest.raises(CircuitOpenError):
        session.get(upstream.url("/"))
    assert upstream.hits("/down") == THRESHOLD
    assert state_events(logs) == ["state.degraded"]
    degraded = next(event for event in logs if event["event"] == "state.degraded")
    assert degraded["error"] == "ConnectionError"
    assert tls_redis.command("EXISTS", host_keys(key_prefix, key)[0]) == 0


def test_a_tls_file_that_cannot_be_read_is_a_config_error_naming_its_key(
    tls_redis: TlsRedisServer, key_prefix: str, tmp_path: Any
) -> None:
    """A session is not built on a CA file that is not there: ConfigError names the key."""
    missing = str(tmp_path / "no-such-ca.pem")
    with pytest.raises(ConfigError, match=r"^state\.ssl_ca_certs: no readable file at "):
        ResilientSession(_config(tls_redis, key_prefix, ssl_ca_certs=missing))
