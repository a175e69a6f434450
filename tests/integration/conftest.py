"""Fixtures for the integration tier: loopback upstreams and sessions tuned for fast retries."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from resilient_session import ResilientSession
from resilient_session.testing.redis_server import RedisServer
from resilient_session.testing.upstream import FlakyUpstream

# Real time is spent in these tests, so backoff is tiny: the behaviour is what is tested.
FAST_RETRY = {"backoff_base": 0.01, "backoff_cap": 0.05}

SessionFactory = Callable[..., ResilientSession]


@pytest.fixture
def upstream() -> Iterator[FlakyUpstream]:
    """A running FlakyUpstream, stopped when the test ends."""
    with FlakyUpstream() as up:
        yield up


@pytest.fixture
def make_session() -> Iterator[SessionFactory]:
    """Build ``ResilientSession``s whose defaults are fast retries plus the given sections.

    ``make_session(retry={"max_attempts": 1}, breaker={...})`` merges each section over the
    fast defaults; every session built is closed when the test ends.
    """
    sessions: list[ResilientSession] = []

    def make(**sections: dict[str, Any]) -> ResilientSession:
        defaults: dict[str, Any] = {"retry": dict(FAST_RETRY)}
        for name, values in sections.items():
            defaults[name] = {**defaults.get(name, {}), **values}
        session = ResilientSession({"defaults": defaults})
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


def _redis_or_skip() -> None:
    """Skip, saying why, when redis-server is missing; under CI (CI=true) fail instead."""
    if shutil.which("redis-server") is None:
        reason = "redis-server is not on PATH (Debian: apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the fleet-state tests: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One throwaway redis-server on a free loopback port for the whole test run; tests
    share it under distinct key prefixes. Never the machine's own Redis."""
    _redis_or_skip()
    with RedisServer() as server:
        yield server


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to kill, pause and restart."""
    _redis_or_skip()
    with RedisServer() as server:
        yield server


@pytest.fixture
def key_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix no other test uses, so tests on the shared server never meet."""
    return f"test:{request.node.name}:{uuid.uuid4().hex[:8]}:"
