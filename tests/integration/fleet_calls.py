"""Calls and waits shared by the fleet tests of each Redis mode (cluster, sentinel, TLS)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session._state.fleet import push
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.testing.upstream import FlakyUpstream

from .conftest import FAST_RETRY

INTERVAL_MS = 50
THRESHOLD = 10


def fleet_config(prefix: str, **state: Any) -> dict[str, Any]:
    """One try a call, a breaker that opens after THRESHOLD failures and stays open 30 s,
    no throttle; the redis backend on *state*, synced every 50 ms."""
    defaults = {
        "retry": {**FAST_RETRY, "max_attempts": 1},
        "breaker": {"failure_threshold": THRESHOLD, "recovery_timeout": 30.0},
        "throttle": {"enabled": False},
    }
    shared = {"backend": "redis", "key_prefix": prefix, "sync_interval_ms": INTERVAL_MS}
    return {"defaults": defaults, "state": {**shared, "timeout_ms": 50, **state}}


def host_key(upstream: FlakyUpstream) -> str:
    return f"http://127.0.0.1:{upstream.port}"


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> float:
    """Seconds until *check* held, polling every 5 ms; fails the test past *timeout*."""
    started = SYSTEM_CLOCK.monotonic()
    while not check():
        if SYSTEM_CLOCK.monotonic() - started > timeout:
            raise AssertionError(f"not true within {timeout} s")
        SYSTEM_CLOCK.sleep(0.005)
    return SYSTEM_CLOCK.monotonic() - started


def fail_until_all_fail_fast(sessions: list[ResilientSession], url: str) -> int:
    """Call round robin until every session refused its last call; returns calls made."""
    failing_fast = [False] * len(sessions)
    for number in range(2_000):
        index = number % len(sessions)
        try:
            sessions[index].get(url)
            failing_fast[index] = False
        except CircuitOpenError:
            failing_fast[index] = True
        if all(failing_fast):
            return number + 1
        SYSTEM_CLOCK.sleep(0.001)
    raise AssertionError("the breakers never all opened")


class Callers:
    """Threads that call *url* through each session, one call every 10 ms, until stopped:
    what every call returned or raised."""

    def __init__(self, sessions: list[ResilientSession], url: str) -> None:
        self.statuses: list[int] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._call, args=(session, url), daemon=True)
            for session in sessions
        ]

    def _call(self, session: ResilientSession, url: str) -> None:
        # At most 10 minutes of calls, whatever happens to the test.
        for _ in range(60_000):
            if self._stop.is_set():
                return
            try:
                self.statuses.append(session.get(url, timeout=5).status_code)
            except requests.RequestException as error:
                self.errors.append(error)
            self._stop.wait(0.01)

    @contextmanager
    def running(self) -> Iterator[Callers]:
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in self._threads:
                thread.join(timeout=10)


def state_events(logs: list[Any]) -> list[str]:
    return [event["event"] for event in logs if event["event"].startswith("state.")]


def subscribed(client: Any, prefix: str, count: int) -> Callable[[], bool]:
    """A check: *count* listeners are subscribed to the openings channel of *prefix*."""
    channel = push.channel(prefix)
    return lambda: int(dict(client.pubsub_numsub(channel)).get(channel.encode(), 0)) == count
