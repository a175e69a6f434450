"""The state hooks on the redis backend, on a real redis-server: the breaker changes a worker
adopts from the fleet, and the backend's degraded, restored and corrected, reach every state
hook of the registry, on the sync thread (an opening pushed, on the listener thread), after
the event that logs them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from resilient_session._observe.hooks import BackendChange, BackendHook, StateChange, TryRecord
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .conftest import FAST_RETRY

pytestmark = pytest.mark.integration

INTERVAL_MS = 50
THRESHOLD = 10
SYNC_THREAD = "resilient-session-state-sync"
PUSH_THREAD = "resilient-session-state-push"


class Recorder:
    """Each state change it hears, with the thread it heard it on."""

    def __init__(self) -> None:
        self.transitions: list[tuple[str, str, str, str]] = []
        self.states: list[tuple[str, dict[str, str | float], str]] = []

    def on_try(self, record: TryRecord, /) -> None:
        """Tries are not what this hook watches."""

    def on_transition(self, change: StateChange, /) -> None:
        thread = threading.current_thread().name
        shown = (change.host, change.from_state.value, change.to_state.value, thread)
        self.transitions.append(shown)

    def on_state(self, change: BackendChange, /) -> None:
        thread = threading.current_thread().name
        self.states.append((change.event, change.event_fields(), thread))


def _config(url: str, prefix: str, timeout_ms: int = 100) -> dict[str, Any]:
    defaults = {
        "retry": {**FAST_RETRY, "max_attempts": 1},
        "breaker": {
            "failure_threshold": THRESHOLD,
            "recovery_timeout": 0.2,
            "recovery_timeout_max": 0.5,
        },
        "throttle": {"enabled": False},
    }
    state = {
        "backend": "redis",
        "url": url,
        "key_prefix": prefix,
        "sync_interval_ms": INTERVAL_MS,
        "timeout_ms": timeout_ms,
    }
    return {"defaults": defaults, "state": state}


def _wait_until(check: Callable[[], bool], timeout: float = 3.0) -> None:
    started = SYSTEM_CLOCK.monotonic()
    while not check():
        if SYSTEM_CLOCK.monotonic() - started > timeout:
            raise AssertionError(f"not true within {timeout} s")
        SYSTEM_CLOCK.sleep(0.005)


def _key(upstream: FlakyUpstream) -> str:
    return f"http://127.0.0.1:{upstream.port}"


def test_the_recorder_is_a_backend_hook() -> None:
    """A hook with on_try, on_transition and on_state is one the backend tells."""
    assert isinstance(Recorder(), BackendHook)


def test_an_opening_relayed_by_the_fleet_reaches_an_idle_workers_hook(
    redis_server, key_prefix, upstream, sessions, logs
):
    """A worker that never saw a failure adopts the fleet's opening, and its hook hears that
    one change, closed to open, on the listener thread that heard it pushed (or the sync
    thread, had its sync read it first), after the breaker.transition event."""
    upstream.script("/down", Reply(503))
    config = _config(redis_server.url, key_prefix)
    failing_hook, idle_hook = Recorder(), Recorder()
    failing = sessions(config, failing_hook)
    idle = sessions(config, idle_hook)
    key = _key(upstream)
    assert idle.get(upstream.url("/")).status_code == 200
    for _ in range(THRESHOLD):
        failing.get(upstream.url("/down"))
    _wait_until(lambda: idle.health()[key].breaker.value == "open")
    _wait_until(lambda: len(idle_hook.transitions) >= 1)
    assert idle_hook.transitions[0][:3] == (key, "closed", "open")
    assert idle_hook.transitions[0][3] in (PUSH_THREAD, SYNC_THREAD)
    assert len(idle_hook.transitions) == 1
    assert idle_hook.states == []
    # The opening worker's own change came from its try, on the caller's thread.
    assert failing_hook.transitions[0][:3] == (key, "closed", "open")
    assert failing_hook.transitions[0][3] not in (PUSH_THREAD, SYNC_THREAD)
    opens = [e for e in logs if e["event"] == "breaker.transition" and e["to"] == "open"]
    assert len(opens) == 2


def test_an_outage_gives_the_hook_one_degraded_then_one_restored(
    own_redis, key_prefix, upstream, sessions, logs
):
    """Redis killed for 0.5 s and restarted: the hook hears state.degraded, then
    state.restored, once each, with the fields the events carry."""
    hook = Recorder()
    session = sessions(_config(own_redis.url, key_prefix), hook)
    key = _key(upstream)
    assert session.get(upstream.url("/")).status_code == 200
    SYSTEM_CLOCK.sleep(3 * INTERVAL_MS / 1000)
    own_redis.kill()
    _wait_until(lambda: session.health()[key].state_degraded)
    SYSTEM_CLOCK.sleep(0.5)
    own_redis.start()
    _wait_until(lambda: not session.health()[key].state_degraded)
    _wait_until(lambda: len(hook.states) >= 2)
    SYSTEM_CLOCK.sleep(3 * INTERVAL_MS / 1000)
    assert [(event, thread) for event, _, thread in hook.states] == [
        ("state.degraded", SYNC_THREAD),
        ("state.restored", SYNC_THREAD),
    ]
    logged = [
        {name: value for name, value in e.items() if name not in ("event", "log_level")}
        for e in logs
        if e["event"].startswith("state.")
    ]
    assert [fields for _, fields, _ in hook.states] == logged
    assert float(hook.states[1][1]["degraded_for"]) >= 0.5


def test_a_poisoned_value_gives_the_hook_one_corrected(
    redis_server, key_prefix, upstream, sessions, logs
):
    """A breaker hash open for a century, written by no worker: the hook hears one
    state.corrected naming the host and the breaker, however many syncs read it."""
    hook = Recorder()
    session = sessions(_config(redis_server.url, key_prefix), hook)
    key = _key(upstream)
    admin = redis.Redis.from_url(redis_server.url)
    try:
        assert session.get(upstream.url("/")).status_code == 200
        breaker_key = f"{key_prefix}{key}:breaker"
        _wait_until(lambda: admin.exists(breaker_key) == 1)
        generation = int(admin.hget(breaker_key, "g") or 0)
        seconds, _ = admin.time()
        until = (int(seconds) + 100 * 365 * 86_400) * 1000
        admin.hset(breaker_key, mapping={"s": 1, "u": until, "g": generation + 1})
        _wait_until(lambda: len(hook.states) >= 1)
        SYSTEM_CLOCK.sleep(5 * INTERVAL_MS / 1000)
    finally:
        admin.close()
    assert hook.states == [
        (
            "state.corrected",
            {"backend": "redis", "url": redis_server.url, "host": key, "fields": "breaker"},
            SYNC_THREAD,
        )
    ]
    assert (key, "closed", "open", SYNC_THREAD) in hook.transitions
    assert len([e for e in logs if e["event"] == "state.corrected"]) == 1
