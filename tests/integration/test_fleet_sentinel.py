"""Fleet state on the master a real Sentinel set names (a master, a replica, three sentinels
asking for a password, on loopback): the fleet's breaker opens across workers, and the master
killed mid-run costs no call; the workers follow the fleet again on the promoted replica."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from devservers.redis_sentinel import RedisSentinels

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session._state.fleet.keys import host_keys
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .conftest import SENTINEL_PASSWORD
from .fleet_calls import (
    THRESHOLD,
    Callers,
    fail_until_all_fail_fast,
    fleet_config,
    host_key,
    state_events,
    wait_until,
)

pytestmark = pytest.mark.integration

WRONG = "not-the-password"

Sessions = Callable[[int, dict[str, Any]], list[ResilientSession]]


def _config(
    sentinels: RedisSentinels, prefix: str, password: str = SENTINEL_PASSWORD
) -> dict[str, Any]:
    # The url's host is not read in sentinel mode: the sentinels name the master.
    return fleet_config(
        prefix,
        mode="sentinel",
        url="redis://fleet/0",
        sentinels=sentinels.addresses,
        service_name=sentinels.service_name,
        sentinel_password=password,
    )


def test_the_fleet_opens_across_workers_on_the_sentinels_master(
    redis_sentinels: RedisSentinels,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """Three workers send at most 2 x failure_threshold tries to a host that answers 503
    before every one fails fast; the opening is on the master, and nothing degrades."""
    upstream.script("/down", Reply(503))
    fleet = fleet_sessions(3, _config(redis_sentinels, key_prefix))
    breaker, _, _, workers = host_keys(key_prefix, host_key(upstream))
    # Each worker's first sync asks the sentinels for the master: done before the host fails.
    for session in fleet:
        assert session.get(upstream.url("/")).status_code == 200
    wait_until(lambda: redis_sentinels.master.command("ZCARD", workers) == 3)
    fail_until_all_fail_fast(fleet, upstream.url("/down"))
    assert THRESHOLD <= upstream.hits("/down") <= 2 * THRESHOLD
    assert redis_sentinels.master.command("HGET", breaker, "s") == "1"
    assert state_events(logs) == []


def test_a_wrong_sentinel_password_degrades_without_failing_a_call(
    redis_sentinels: RedisSentinels,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """Sentinels that refuse the password name no master: the worker serves every call,
    degrades once, and its breaker opens on its own failures, as with memory."""
    (session,) = fleet_sessions(1, _config(redis_sentinels, key_prefix, password=WRONG))
    key = host_key(upstream)
    assert session.get(upstream.url("/")).status_code == 200
    wait_until(lambda: session.health()[key].state_degraded, timeout=5.0)
    upstream.script("/down", Reply(503))
    for _ in range(THRESHOLD):
        assert session.get(upstream.url("/down")).status_code == 503
    with pytest.raises(CircuitOpenError):
        session.get(upstream.url("/"))
    assert state_events(logs) == ["state.degraded"]
    degraded = next(event for event in logs if event["event"] == "state.degraded")
    assert degraded["error"] == "MasterNotFoundError"


def test_the_master_killed_mid_run_costs_no_call_and_the_fleet_is_followed_after_failover(
    redis_sentinels: RedisSentinels,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """The master is killed while two workers call the host every 10 ms: no call fails, both
    go degraded until the sentinels promote the replica (down after 500 ms), both are
    restored, and an opening by one worker is then written to the new master and followed
    by the other."""
    first, second = fleet_sessions(2, _config(redis_sentinels, key_prefix))
    key = host_key(upstream)
    breaker, _, _, workers = host_keys(key_prefix, key)
    both = (first, second)
    with Callers([first, second], upstream.url("/")).running() as callers:
        wait_until(lambda: redis_sentinels.master.command("ZCARD", workers) == 2)
        killed = redis_sentinels.kill_master()
        wait_until(lambda: all(s.health()[key].state_degraded for s in both), timeout=10)
        promoted = redis_sentinels.wait_failover()
        wait_until(lambda: not any(s.health()[key].state_degraded for s in both), timeout=10)
    assert callers.errors == []
    assert len(callers.statuses) > 0
    assert set(callers.statuses) == {200}
    assert promoted is redis_sentinels.replica
    assert killed is redis_sentinels.master

    upstream.script("/down", Reply(503))
    for _ in range(THRESHOLD):
        assert first.get(upstream.url("/down")).status_code == 503
    wait_until(lambda: second.health()[key].breaker.value == "open", timeout=2.0)
    with pytest.raises(CircuitOpenError):
        second.get(upstream.url("/"))
    assert promoted.command("HGET", breaker, "s") == "1"
    events = state_events(logs)
    assert events.count("state.degraded") == events.count("state.restored") == 2
