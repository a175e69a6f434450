"""A real redis-server paused for a moment is no outage; paused for a second it is one, told
once when it begins and once when it ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from devservers.redis_server import RedisServer

from resilient_session import ResilientSession
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.testing.upstream import FlakyUpstream

pytestmark = pytest.mark.integration

INTERVAL_MS = 50
TIMEOUT_MS = 20


def _config(url: str, prefix: str) -> dict[str, Any]:
    state = {
        "backend": "redis",
        "url": url,
        "key_prefix": prefix,
        "sync_interval_ms": INTERVAL_MS,
        "timeout_ms": TIMEOUT_MS,
    }
    return {"defaults": {"retry": {"max_attempts": 1}}, "state": state}


def _wait_until(check: Callable[[], bool], timeout: float) -> float:
    """Seconds until *check* held, polling every 5 ms; fails the test past *timeout*."""
    started = SYSTEM_CLOCK.monotonic()
    while not check():
        if SYSTEM_CLOCK.monotonic() - started > timeout:
            raise AssertionError(f"not true within {timeout} s")
        SYSTEM_CLOCK.sleep(0.005)
    return SYSTEM_CLOCK.monotonic() - started


def _state_events(logs: list[Any]) -> list[str]:
    return [event["event"] for event in logs if event["event"].startswith("state.")]


def test_redis_paused_for_a_tenth_of_a_second_now_and_then_logs_nothing(
    own_redis: RedisServer, key_prefix: str, upstream: FlakyUpstream, logs: list[Any]
) -> None:
    """Paused 120 ms three times (two syncs in a row or more time out at 20 ms, as on a busy
    host): no state.degraded, no state.restored, never degraded, and no call fails."""
    with ResilientSession(_config(own_redis.url, key_prefix)) as session:
        key = f"http://127.0.0.1:{upstream.port}"
        degraded_seen = []
        for _ in range(3):
            for _ in range(3):
                assert session.get(upstream.url("/")).status_code == 200
            own_redis.pause()
            SYSTEM_CLOCK.sleep(0.12)
            degraded_seen.append(session.health()[key].state_degraded)
            own_redis.resume()
            # Two good syncs after it, at least.
            SYSTEM_CLOCK.sleep(4 * INTERVAL_MS / 1000)
            degraded_seen.append(session.health()[key].state_degraded)
    assert degraded_seen == [False] * 6
    assert _state_events(logs) == []
    assert upstream.hits("/") == 9


def test_redis_paused_for_a_second_is_one_outage(
    own_redis: RedisServer, key_prefix: str, upstream: FlakyUpstream, logs: list[Any]
) -> None:
    """Paused 1 s: one state.degraded (TimeoutError) while paused, one state.restored within
    a second of SIGCONT, degraded_for between 0.25 s and 3 s."""
    with ResilientSession(_config(own_redis.url, key_prefix)) as session:
        key = f"http://127.0.0.1:{upstream.port}"
        assert session.get(upstream.url("/")).status_code == 200
        _wait_until(lambda: key in session.health(), timeout=2.0)
        own_redis.pause()
        _wait_until(lambda: session.health()[key].state_degraded, timeout=2.0)
        SYSTEM_CLOCK.sleep(0.6)
        own_redis.resume()
        _wait_until(lambda: not session.health()[key].state_degraded, timeout=1.0)
        SYSTEM_CLOCK.sleep(4 * INTERVAL_MS / 1000)
    assert _state_events(logs) == ["state.degraded", "state.restored"]
    degraded, restored = (e for e in logs if e["event"].startswith("state."))
    assert degraded["error"] == "TimeoutError"
    assert 0.25 <= restored["degraded_for"] <= 3.0
