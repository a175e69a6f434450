"""The fleet breaker's rule on a real redis-server: random partial failure never trips it,
a host that is down still opens it within about one threshold of failures fleet-wide."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import requests

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session._state.breaker import BreakerState, TryResult
from resilient_session._state.fleet.breaker import FleetBreaker
from resilient_session._state.fleet.budget import FleetBucket
from resilient_session._state.fleet.lua import SYNC
from resilient_session._state.fleet.sync_batch import SyncedHost, take_batch, take_in
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config.policy import BreakerPolicy, HostPolicy
from resilient_session.testing import FakeClock
from resilient_session.testing.upstream import FlakyUpstream, Reply
from tests.threads import run_together

from .conftest import FAST_RETRY

pytestmark = pytest.mark.integration

THREADS = 8
CALLS_PER_THREAD = 400
# Paced as a service is, so most syncs a failure wakes end in that failure.
PAUSE = 0.01
THRESHOLD = 20  # the default failure_threshold


def _config(url: str, prefix: str) -> dict[str, Any]:
    return {
        "defaults": {
            "retry": {**FAST_RETRY, "max_attempts": 1},
            "throttle": {"enabled": False},
            "breaker": {"recovery_timeout": 5.0},
        },
        "state": {"backend": "redis", "url": url, "key_prefix": prefix, "sync_interval_ms": 100},
    }


@pytest.fixture
def fleet_session(redis_server, key_prefix) -> Iterator[ResilientSession]:
    """A redis-backed session at the default breaker threshold, one try per call."""
    session = ResilientSession(_config(redis_server.url, key_prefix))
    yield session
    session.close()


def _random_503(upstream: FlakyUpstream, path: str, share: float) -> None:
    """Script *path* to answer 503 to *share* of its requests, at random (seeded)."""
    draw = random.Random(7)
    steps = [Reply(503) if draw.random() < share else Reply(200) for _ in range(1_000)]
    upstream.script(path, *steps, cycle=True)


def _hammer(session: ResilientSession, url: str) -> dict[str, int]:
    """8 threads x 400 calls, 10 ms apart; counts of how each call ended."""
    counts = {"refused": 0, "answered": 0, "errors": 0}
    lock = threading.Lock()

    def body(_: int) -> None:
        for _ in range(CALLS_PER_THREAD):
            try:
                session.get(url)
                outcome = "answered"
            except CircuitOpenError:
                outcome = "refused"
            except requests.RequestException:
                outcome = "errors"
            with lock:
                counts[outcome] += 1
            SYSTEM_CLOCK.sleep(PAUSE)

    run_together(THREADS, body, timeout=60.0)
    return counts


@pytest.mark.parametrize("share", [0.3, 0.5])
def test_random_failures_never_trip_the_fleet_breaker(upstream, fleet_session, share):
    """A host answering 503 to 30 % or 50 % of tries at random, 8 threads on the redis
    backend: at most 1 % of calls refused by the breaker, as with the memory backend."""
    _random_503(upstream, "/brownout", share)
    counts = _hammer(fleet_session, upstream.url("/brownout"))
    total = THREADS * CALLS_PER_THREAD
    assert counts["errors"] == 0
    assert counts["refused"] <= total // 100, counts


def test_a_host_that_is_down_still_fails_fast_fleet_wide(upstream, fleet_session):
    """Every try answered 503: at least 80 % of calls are refused, and the host sees at most
    2 x failure_threshold tries before the breaker opens."""
    upstream.script("/down", Reply(503))
    counts = _hammer(fleet_session, upstream.url("/down"))
    total = THREADS * CALLS_PER_THREAD
    assert counts["refused"] >= 0.8 * total, counts
    assert THRESHOLD <= upstream.hits("/down") <= 2 * THRESHOLD


@pytest.fixture
def client(redis_server) -> Iterator[redis.Redis]:
    """A plain client to the test Redis, to run the script as a worker's sync does."""
    plain = redis.Redis.from_url(redis_server.url)
    yield plain
    plain.close()


def _worker(
    client: redis.Redis, key_prefix: str, name: str
) -> tuple[Callable[[], None], FleetBreaker, FakeClock]:
    """A worker's breaker on its own fake clock, and ``sync()``: one script call for it."""
    clock = FakeClock()
    policy = HostPolicy(breaker=BreakerPolicy(failure_threshold=5, recovery_timeout=1.0))
    breaker = FleetBreaker(RULE_KEY, policy.breaker, clock, random.Random(0), lambda: None)
    host = SyncedHost.of(
        RULE_KEY, key_prefix, policy, breaker, FleetBucket(policy.budget, clock), None
    )

    def sync() -> None:
        batch = take_batch(host, name, 1_000, random.Random(0))
        take_in(host, batch, client.eval(SYNC, len(host.keys), *host.keys, *batch.args))

    return sync, breaker, clock


def _record(breaker: FleetBreaker, *results: TryResult) -> None:
    for result in results:
        permit, _ = breaker.allow()
        assert permit is not None
        breaker.record(permit, result)


RULE_KEY = "http://rule.test:80"
_S, _F = TryResult.SUCCESS, TryResult.FAILURE


def test_a_success_from_before_the_failures_reported_late_drops_none_of_them(client, key_prefix):
    """Worker a: a success, then 3 failures 100 ms later. Worker b's success came 50 ms
    before a's (it reports it after a's failures), then 2 failures: the fleet's run is 5,
    the threshold, and it opens, as an outage every worker saw a success before must."""
    sync_a, a, clock_a = _worker(client, key_prefix, "a")
    sync_b, b, clock_b = _worker(client, key_prefix, "b")
    clock_b.advance(0.0)
    _record(b, _S)
    clock_b.advance(0.05)
    clock_a.advance(0.05)
    _record(a, _S)
    clock_a.advance(0.1)
    _record(a, _F, _F, _F)
    clock_b.advance(0.1)
    sync_a()
    _record(b, _F, _F)
    sync_b()
    assert b.state is BreakerState.OPEN


def test_a_success_after_the_failures_ends_their_run(client, key_prefix):
    """Worker a: 3 failures 200 ms ago; worker b: a success 100 ms ago, then 1 failure: the
    success came after a's failures, so the fleet's run is b's 1; worker c's 3 failures make
    it 4, and the breaker stays closed where the sum (7) would have opened it."""
    sync_a, a, clock_a = _worker(client, key_prefix, "a")
    sync_b, b, clock_b = _worker(client, key_prefix, "b")
    sync_c, c, _ = _worker(client, key_prefix, "c")
    _record(a, _F, _F, _F)
    clock_a.advance(0.2)
    sync_a()
    _record(b, _S)
    clock_b.advance(0.1)
    _record(b, _F)
    sync_b()
    _record(c, _F, _F, _F)
    sync_c()
    run = client.hget(f"{key_prefix}{RULE_KEY}:breaker", "f")
    assert (run, c.state) == (b"4", BreakerState.CLOSED)
