"""The fleet breaker's rule on a real redis-server: random partial failure never trips it,
a host that is down still opens it within about one threshold of failures fleet-wide."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.upstream import FlakyUpstream, Reply
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
