"""When failed syncs make an outage, on a fake clock: late replies on a busy host are no event,
a Redis gone for longer is one state.degraded and one state.restored."""

from __future__ import annotations

import random
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import redis

from resilient_session._state.fleet import redis_backend, sync_thread
from resilient_session._state.fleet.redis_backend import RedisBackend
from resilient_session._state.fleet.sync_batch import Batch, SyncedHost
from resilient_session._state.interface import Held
from resilient_session.config.policy import HostPolicy, StatePolicy
from resilient_session.testing import FakeClock

INTERVAL = 0.1
KEY = "http://svc.test:80"
# A healthy reply for one host: closed, one worker, a full bucket (lua.py has the layout).
HEALTHY: list[object] = [0, 0, 1, "10", 0, 0, 1, 0, 0]

Logs = list[MutableMapping[str, Any]]


class Redis:
    """What each sync meets: a reply, or an error, in the order given; healthy once told none."""

    def __init__(self) -> None:
        self.script: list[Exception | None] = []

    def run(self, hosts: list[SyncedHost], batches: list[Batch]) -> list[Any]:
        error = self.script.pop(0) if self.script else None
        if error is not None:
            raise error
        return [list(HEALTHY) for _ in hosts]


class Worker:
    """A redis backend serving one host in use, synced by hand on the fake clock: no thread,
    no socket."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        policy = StatePolicy(
            backend="redis", url="redis://127.0.0.1:1/0", sync_interval_ms=int(INTERVAL * 1000)
        )
        self.backend = RedisBackend(policy, clock, random.Random(0))
        host_policy = HostPolicy()
        self.guards = self.backend.build(KEY, host_policy)
        held: list[Held] = [(KEY, host_policy, self.guards, None)]
        self.backend.serve(lambda: list(held))
        self.redis = Redis()

    def syncs(self, script: list[Exception | None]) -> list[bool]:
        """One call and one sync per interval, each sync meeting the next of *script*; whether
        the backend was degraded after each."""
        self.redis.script = list(script)
        degraded = []
        for _ in script:
            self.clock.advance(INTERVAL)
            # A call's deposit: the host stays in use, so every sync sends it.
            self.guards[1].deposit()
            self.backend.sync()
            degraded.append(self.backend.degraded)
        assert self.redis.script == []
        return degraded


@pytest.fixture
def worker(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    """A worker whose Redis answers as each test scripts it."""
    monkeypatch.setattr(sync_thread, "run", lambda *args: None)
    monkeypatch.setattr(redis_backend, "SYSTEM_CLOCK", clock)
    made = Worker(clock)
    monkeypatch.setattr(made.backend, "_run_script", made.redis.run)
    yield made
    made.backend.close()


def _state_events(logs: Logs) -> list[MutableMapping[str, Any]]:
    return [event for event in logs if event["event"].startswith("state.")]


def test_two_late_replies_in_a_row_twice_on_a_healthy_redis_are_no_outage(worker, logs):
    """Two timed-out syncs in a row, twice within 1 s, each followed by good replies: no
    state.degraded, no state.restored, never degraded."""
    late = redis.TimeoutError("Timeout reading from socket")
    degraded = worker.syncs([None, late, late, None, None, None, late, late, None, None])
    assert degraded == [False] * 10
    assert _state_events(logs) == []


def test_one_late_reply_now_and_then_is_no_outage(worker, logs):
    """Every third sync times out for 3 s: no event, never degraded."""
    degraded = worker.syncs([None, None, redis.TimeoutError("late")] * 10)
    assert degraded == [False] * 30
    assert _state_events(logs) == []


def test_a_redis_down_for_a_second_is_one_degraded_then_one_restored(worker, logs):
    """Refused for 10 syncs (about 1 s): degraded from the first failed sync 300 ms after the
    first (3 sync intervals), restored by the first good reply; one event each, degraded_for
    counted from the first failure."""
    down = redis.ConnectionError("Connection refused")
    degraded = worker.syncs([None, *[down] * 10, None, None])
    assert degraded == [False] * 4 + [True] * 7 + [False] * 2
    events = _state_events(logs)
    assert [event["event"] for event in events] == ["state.degraded", "state.restored"]
    assert events[0]["error"] == "ConnectionError"
    assert events[1]["degraded_for"] == pytest.approx(1.0)


def test_a_redis_gone_twice_is_two_outages(worker, logs):
    """Two outages of 0.6 s with good syncs between: two degraded/restored pairs, in order."""
    down = redis.TimeoutError("late")
    degraded = worker.syncs([*[down] * 7, None, None, *[down] * 7, None])
    assert degraded.count(True) == 8
    names = [event["event"] for event in _state_events(logs)]
    assert names == ["state.degraded", "state.restored"] * 2
