"""Idle hosts on a real redis-server: a sync sends the hosts in use, and none of the idle ones
while their openings are pushed, so its cost follows the hosts called, not the hosts held."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from devservers.redis_server import RedisServer

from resilient_session import ResilientSession
from resilient_session._state.breaker import TryResult
from resilient_session._state.fleet.redis_backend import RedisBackend
from resilient_session._state.registry import HostRegistry, HostState
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config.model import load
from resilient_session.testing.upstream import FlakyUpstream

pytestmark = pytest.mark.integration

INTERVAL_MS = 50
IDLE_HOSTS = 2_000


def _config(url: str, prefix: str, **defaults: Any) -> dict[str, Any]:
    state = {
        "backend": "redis",
        "url": url,
        "key_prefix": prefix,
        "sync_interval_ms": INTERVAL_MS,
        "timeout_ms": 20,
    }
    return {"defaults": {"retry": {"max_attempts": 1}, **defaults}, "state": state}


def _wait_until(check: Callable[[], bool], timeout: float) -> None:
    """Poll *check* every 10 ms; fail the test past *timeout* seconds."""
    until = SYSTEM_CLOCK.monotonic() + timeout
    while not check():
        if SYSTEM_CLOCK.monotonic() > until:
            raise AssertionError(f"not true within {timeout} s")
        SYSTEM_CLOCK.sleep(0.01)


def _try(state: HostState) -> None:
    """One call's one successful try on the host's guards, as the stages make it."""
    state.bucket.deposit()
    permit, _ = state.breaker.closed_admission or state.breaker.allow()
    assert permit is not None
    state.breaker.record(permit, TryResult.SUCCESS)


def _evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_two_thousand_idle_hosts_cost_the_syncs_no_script_call(own_redis: RedisServer, key_prefix):
    """2,000 hosts each called once, then left, the listener subscribed: once idle, no sync
    runs the script for any of them, and the backend is not degraded. A try on an idle host
    then has its state written within a fraction of a second."""
    registry = HostRegistry(load(_config(own_redis.url, key_prefix)))
    client = redis.Redis.from_url(own_redis.url)
    backend = registry.backend
    assert isinstance(backend, RedisBackend)
    durations: list[float] = []
    sync = backend.sync

    def timed() -> None:
        began = SYSTEM_CLOCK.monotonic()
        sync()
        durations.append(SYSTEM_CLOCK.monotonic() - began)

    try:
        channel = f"{key_prefix}openings"
        _wait_until(lambda: dict(client.pubsub_numsub(channel)).get(channel.encode()) == 1, 2.0)
        states = [registry.for_url(f"http://h{n}.idle.test/") for n in range(IDLE_HOSTS)]
        for state in states:
            _try(state)
        # Each host stays in use for a second after its try (the budget split's alive window).
        SYSTEM_CLOCK.sleep(1.5)
        backend.sync = timed  # type: ignore[method-assign]
        calls = _evalsha_calls(client)
        SYSTEM_CLOCK.sleep(1.0)
        calls = _evalsha_calls(client) - calls
        assert calls == 0
        assert len(durations) >= 5
        assert backend.degraded is False

        workers = f"{key_prefix}http://h7.idle.test:80:workers"
        before = client.zscore(workers, backend._worker)
        assert before is not None
        _try(states[7])
        _wait_until(lambda: client.zscore(workers, backend._worker) != before, timeout=1.0)
        assert backend.degraded is False
    finally:
        registry.close()
        client.close()


def test_an_idle_worker_leaves_its_share_of_the_budget_to_the_workers_calling(
    redis_server: RedisServer, key_prefix, upstream: FlakyUpstream
):
    """Two workers share a host's bucket of 8 tokens, 4 each. One stops calling: it drops out
    of the host's workers and the other holds all 8. Its next call brings it back at once,
    and both hold 4 again."""
    budget = {"ratio": 0.0, "min_per_second": 0.0, "max_tokens": 8}
    config = _config(redis_server.url, key_prefix, budget=budget)
    busy, quiet = ResilientSession(config), ResilientSession(config)
    key = f"http://127.0.0.1:{upstream.port}"

    def tokens(session: ResilientSession) -> float:
        return session.health()[key].tokens

    try:
        for session in (busy, quiet):
            assert session.get(upstream.url("/")).status_code == 200
        _wait_until(lambda: tokens(busy) == tokens(quiet) == 4.0, timeout=2.0)

        def busy_holds_all() -> bool:
            assert busy.get(upstream.url("/")).status_code == 200
            return tokens(busy) == 8.0

        _wait_until(busy_holds_all, timeout=5.0)
        assert tokens(quiet) == 4.0
        assert quiet.get(upstream.url("/")).status_code == 200
        _wait_until(lambda: tokens(busy) == tokens(quiet) == 4.0, timeout=2.0)
    finally:
        busy.close()
        quiet.close()
