"""Fixtures for the integration tier: loopback upstreams and sessions tuned for fast retries."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, Protocol, TypeVar

import pytest
import redis
from devservers.redis_cluster import RedisClusterNodes
from devservers.redis_sentinel import RedisSentinels
from devservers.redis_server import RedisPartMissing, RedisServer
from devservers.redis_tls import TlsRedisServer

from resilient_session import ResilientSession
from resilient_session.testing.upstream import FlakyUpstream

# Real time is spent in these tests, so backoff is tiny: the behaviour is what is tested.
FAST_RETRY = {"backoff_base": 0.01, "backoff_cap": 0.05}

SessionFactory = Callable[..., ResilientSession]
SENTINEL_PASSWORD = "sentinel-pw"  # noqa: S105 - a throwaway set's, on loopback
CLUSTER_NICENESS = 5


class Startable(Protocol):
    def start(self) -> None: ...
    def close(self) -> None: ...


Part = TypeVar("Part", bound=Startable)


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


def _missing(reason: str) -> NoReturn:
    """Skip, saying why; under CI (CI=true) fail instead: CI runs every fleet-state test."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the fleet-state tests: {reason}")
    pytest.skip(reason)


def _redis_or_skip() -> None:
    """Skip, saying why, when redis-server is missing; under CI (CI=true) fail instead."""
    if shutil.which("redis-server") is None:
        _missing("redis-server is not on PATH (Debian: apt-get install redis-server)")


@contextmanager
def _started(make: Callable[[], Part]) -> Iterator[Part]:
    """A Redis set-up made and started, stopped and its files removed at the end; a part
    missing here (a program, TLS in redis-server) skips the test, saying which, or fails it
    under CI."""
    try:
        part = make()
        part.start()
    except RedisPartMissing as missing:
        _missing(str(missing))
    try:
        yield part
    finally:
        part.close()


@pytest.fixture
def redis_cluster() -> Iterator[RedisClusterNodes]:
    """A Redis Cluster of this test's own: 3 masters with a replica each, on loopback."""
    with _started(RedisClusterNodes) as cluster:
        yield cluster


@pytest.fixture
def redis_cluster_masters() -> Iterator[RedisClusterNodes]:
    """3 masters and no replica, each at niceness 5: the push benchmark's cluster, at a
    niceness any user may set."""
    with _started(lambda: RedisClusterNodes(replicas=0, niceness=CLUSTER_NICENESS)) as cluster:
        yield cluster


@pytest.fixture
def redis_sentinels() -> Iterator[RedisSentinels]:
    """A master, its replica and 3 sentinels (quorum 2, the master down after 500 ms), the
    sentinels asking for a password."""
    with _started(lambda: RedisSentinels(password=SENTINEL_PASSWORD)) as sentinels:
        yield sentinels


@pytest.fixture
def tls_redis() -> Iterator[TlsRedisServer]:
    """A redis-server that speaks TLS only and asks every client for a certificate."""
    with _started(lambda: TlsRedisServer(client_certificates=True)) as server:
        yield server


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


@pytest.fixture
def fleet_sessions() -> Iterator[Callable[[int, dict[str, Any]], list[ResilientSession]]]:
    """``fleet_sessions(n, config)``: n sessions, each with its own state backend and sync
    thread, as n worker processes would have; all closed when the test ends."""
    made: list[ResilientSession] = []

    def make(count: int, config: dict[str, Any]) -> list[ResilientSession]:
        sessions = [ResilientSession(config) for _ in range(count)]
        made.extend(sessions)
        return sessions

    yield make
    for session in made:
        session.close()


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client to the test Redis, as a co-tenant or a stranger with rights would hold."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def sessions() -> Iterator[Callable[..., ResilientSession]]:
    """``sessions(config, *hooks)``: a session of its own registry telling *hooks*; all
    closed when the test ends."""
    made: list[ResilientSession] = []

    def make(config: dict[str, Any], *hooks: Any) -> ResilientSession:
        session = ResilientSession(config, try_hooks=list(hooks))
        made.append(session)
        return session

    yield make
    for session in made:
        session.close()
