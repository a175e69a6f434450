"""Values under the prefix that no worker's sync wrote, on a real redis-server: an opening
past recovery_timeout_max, buckets and members from the future, counts that are no counts.
Each is corrected on read, logged once, and costs the host nothing it would not otherwise pay."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis

from resilient_session import ResilientSession
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .conftest import FAST_RETRY

pytestmark = pytest.mark.integration

INTERVAL_MS = 50
RECOVERY_MAX = 0.5
CENTURIES_MS = 285 * 365 * 86_400_000


def _session(url: str, prefix: str, **sections: Any) -> ResilientSession:
    defaults: dict[str, Any] = {
        "retry": {**FAST_RETRY, "max_attempts": 3},
        "breaker": {"recovery_timeout": 0.2, "recovery_timeout_max": RECOVERY_MAX},
        "throttle": {"enabled": False},
    }
    for name, values in sections.items():
        defaults[name] = {**defaults.get(name, {}), **values}
    # A generous timeout_ms: a sync that corrects 10,000 members must not lose its reply on
    # a loaded machine, or the correction is made but never logged.
    state = {
        "backend": "redis",
        "url": url,
        "key_prefix": prefix,
        "sync_interval_ms": INTERVAL_MS,
        "timeout_ms": 500,
    }
    return ResilientSession({"defaults": defaults, "state": state})


def _key(upstream: FlakyUpstream) -> str:
    return f"http://127.0.0.1:{upstream.port}"


def _wait_until(check: Callable[[], bool], timeout: float = 3.0) -> None:
    started = SYSTEM_CLOCK.monotonic()
    while not check():
        if SYSTEM_CLOCK.monotonic() - started > timeout:
            raise AssertionError(f"not true within {timeout} s")
        SYSTEM_CLOCK.sleep(0.005)


def _server_ms(admin: redis.Redis) -> int:
    seconds, micros = admin.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _synced(session: ResilientSession, key: str) -> None:
    """Two syncs after now: the second has read back what the first wrote."""
    SYSTEM_CLOCK.sleep(3 * INTERVAL_MS / 1000)
    assert session.health()[key].state_degraded is False


SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text()
)


def _corrections(logs: list[Any]) -> list[tuple[str, str]]:
    """The state.corrected events, each checked against docs/events.schema.json."""
    found = [e for e in logs if e["event"] == "state.corrected"]
    for captured in found:
        event = {key: value for key, value in captured.items() if key != "log_level"}
        jsonschema.validate(
            {**event, "level": "warning", "timestamp": "2026-01-05T10:00:07Z"}, SCHEMA
        )
    return [(e["host"], e["fields"]) for e in found]


def test_an_opening_centuries_long_lasts_at_most_recovery_timeout_max(
    redis_server, key_prefix, upstream, admin, logs
):
    """A breaker hash open until 285 years from now: the worker opens for at most
    recovery_timeout_max, then a probe to the healthy host closes it; logged once."""
    key = _key(upstream)
    with _session(redis_server.url, key_prefix) as session:
        assert session.get(upstream.url("/")).status_code == 200
        breaker_key = f"{key_prefix}{key}:breaker"
        _wait_until(lambda: admin.exists(breaker_key) == 1)
        generation = int(admin.hget(breaker_key, "g") or 0)
        until = _server_ms(admin) + CENTURIES_MS
        admin.hset(breaker_key, mapping={"s": 1, "u": until, "g": generation + 1})
        _wait_until(lambda: session.health()[key].breaker.value == "open")
        assert session.health()[key].open_for <= RECOVERY_MAX
        stored = int(admin.hget(breaker_key, "u") or 0)
        assert stored - _server_ms(admin) <= RECOVERY_MAX * 1000
        _wait_until(lambda: session.health()[key].open_for == 0.0, timeout=RECOVERY_MAX + 1.0)
        _wait_until(lambda: session.get(upstream.url("/")).status_code == 200)
        assert session.health()[key].breaker.value == "closed"
        _synced(session, key)
    assert _corrections(logs) == [(key, "breaker")]


def test_a_throttle_bucket_from_the_future_refuses_nothing(
    redis_server, key_prefix, upstream, admin, logs
):
    """A window bucket dated a day ahead holding a million failed tries is dropped: a healthy
    host keeps being served, none of 40 calls throttled."""
    key = _key(upstream)
    sections = {"throttle": {"enabled": True, "min_tries": 5}}
    with _session(redis_server.url, key_prefix, **sections) as session:
        assert session.get(upstream.url("/")).status_code == 200
        throttle_key = f"{key_prefix}{key}:throttle"
        _wait_until(lambda: admin.exists(throttle_key) == 1)
        future = (_server_ms(admin) + 86_400_000) // 1000
        admin.hset(throttle_key, mapping={f"{future}:t": 1_000_000, f"{future - 1}:t": "NaN"})
        _synced(session, key)
        statuses = [session.get(upstream.url("/")).status_code for _ in range(40)]
        assert statuses == [200] * 40
        assert session.health()[key].throttled == 0
        assert admin.hget(throttle_key, f"{future}:t") is None
    assert _corrections(logs) == [(key, "throttle")]


def test_workers_from_the_future_leave_a_retry_its_token(
    redis_server, key_prefix, upstream, admin, logs
):
    """Ten thousand :workers members scored a day ahead would split the budget ten thousand
    ways; they are dropped, and a 503 is still retried to a 200."""
    key = _key(upstream)
    with _session(redis_server.url, key_prefix) as session:
        assert session.get(upstream.url("/")).status_code == 200
        workers_key = f"{key_prefix}{key}:workers"
        _wait_until(lambda: admin.exists(workers_key) == 1)
        ahead = _server_ms(admin) + 86_400_000
        admin.zadd(workers_key, {f"stranger-{i}": ahead for i in range(10_000)})
        _synced(session, key)
        assert admin.zcard(workers_key) == 1
        upstream.script("/flaky", Reply(503), Reply(200))
        assert session.get(upstream.url("/flaky")).status_code == 200
        assert upstream.hits("/flaky") == 2
        assert session.health()[key].tokens >= 1.0
    assert _corrections(logs) == [(key, "workers")]


@pytest.mark.parametrize(
    ("fields", "tokens_after"),
    [({"t": "nan"}, 0.0), ({"t": "1e300"}, 10.0), ({"t": "-5"}, 0.0)],
    ids=["nan", "huge", "negative"],
)
def test_budget_tokens_out_of_range_are_clamped(
    redis_server, key_prefix, upstream, admin, logs, fields, tokens_after
):
    """Tokens that are no number or out of [0, max_tokens] are clamped into it and written
    back so; a refill time from the future is taken as now, so the refill goes on."""
    key = _key(upstream)
    sections = {"budget": {"ratio": 0.0, "min_per_second": 0.0, "max_tokens": 10}}
    with _session(redis_server.url, key_prefix, **sections) as session:
        assert session.get(upstream.url("/")).status_code == 200
        budget_key = f"{key_prefix}{key}:budget"
        _wait_until(lambda: admin.exists(budget_key) == 1)
        admin.hset(budget_key, mapping={**fields, "a": _server_ms(admin) + CENTURIES_MS})
        _synced(session, key)
        stored = float(admin.hget(budget_key, "t") or -1)
        assert stored == tokens_after
        assert int(admin.hget(budget_key, "a") or 0) <= _server_ms(admin)
        assert session.health()[key].tokens == pytest.approx(tokens_after)
    assert _corrections(logs) == [(key, "budget")]


def test_a_breaker_hash_of_nonsense_is_rebuilt_from_this_workers_state(
    redis_server, key_prefix, upstream, admin, logs
):
    """State 7, a generation that is no integer, a run of a billion failures: the hash is
    rebuilt from this worker's closed breaker, and the host is served."""
    key = _key(upstream)
    with _session(redis_server.url, key_prefix) as session:
        assert session.get(upstream.url("/")).status_code == 200
        breaker_key = f"{key_prefix}{key}:breaker"
        _wait_until(lambda: admin.exists(breaker_key) == 1)
        admin.hset(breaker_key, mapping={"s": 7, "g": "1.5", "r": "1:1000000000", "o": -3})
        _synced(session, key)
        assert admin.hget(breaker_key, "s") == b"0"
        assert admin.hget(breaker_key, "r") == b""
        assert [session.get(upstream.url("/")).status_code for _ in range(5)] == [200] * 5
    assert _corrections(logs) == [(key, "breaker")]
