"""A sync that reaches some hosts and not others (a Redis Cluster with a master out of reach),
on a fake clock: the hosts reached follow the fleet, the others' batches wait for a later
sync, and failing for 3 sync intervals is one outage, told once each way."""

from __future__ import annotations

import random
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from resilient_session._state.breaker import BreakerState
from resilient_session._state.fleet import redis_backend, sync_thread
from resilient_session._state.fleet.redis_backend import RedisBackend
from resilient_session._state.fleet.sync_batch import Batch, SyncedHost
from resilient_session._state.interface import Guards, Held
from resilient_session.config.policy import HostPolicy, StatePolicy
from resilient_session.testing import FakeClock

INTERVAL = 0.1
REACHED = "http://reached.test:80"
LOST = "http://lost.test:80"
# The script's reply (lua.py): closed, or open for 30 s at generation 7; one worker.
CLOSED: list[object] = [0, 0, 1, "10", 0, 0, 1, 0, 0]
OPEN: list[object] = [1, 30_000, 7, "10", 0, 0, 1, 0, 0]

Logs = list[MutableMapping[str, Any]]


class Fleet:
    """Two hosts in use, synced by hand; each sync's reply to each host is scripted."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        policy = StatePolicy(
            backend="redis",
            mode="cluster",
            url="redis://127.0.0.1:1/0",
            sync_interval_ms=int(INTERVAL * 1000),
        )
        self.backend = RedisBackend(policy, clock, random.Random(0))
        host_policy = HostPolicy()
        self.guards: dict[str, Guards] = {}
        held: list[Held] = []
        for key in (REACHED, LOST):
            self.guards[key] = self.backend.build(key, host_policy)
            held.append((key, host_policy, self.guards[key], None))
        self.backend.serve(lambda: list(held))
        self.replies: dict[str, Any] = {REACHED: CLOSED, LOST: CLOSED}
        self.sent: list[dict[str, Batch]] = []

    def run(self, hosts: list[SyncedHost], batches: list[Batch]) -> list[Any]:
        self.sent.append({host.key: batch for host, batch in zip(hosts, batches, strict=True)})
        return [self.replies[host.key] for host in hosts]

    def syncs(self, count: int) -> list[bool]:
        """*count* syncs, one interval apart, a deposit on each host before each."""
        degraded = []
        for _ in range(count):
            self.clock.advance(INTERVAL)
            for guards in self.guards.values():
                guards[1].deposit()
            self.backend.sync()
            degraded.append(self.backend.degraded)
        return degraded


@pytest.fixture
def fleet(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    monkeypatch.setattr(sync_thread, "run", lambda *args: None)
    monkeypatch.setattr(redis_backend, "SYSTEM_CLOCK", clock)
    made = Fleet(clock)
    monkeypatch.setattr(made.backend, "_run_script", made.run)
    yield made
    made.backend.close()


def _state_events(logs: Logs) -> list[MutableMapping[str, Any]]:
    return [event for event in logs if event["event"].startswith("state.")]


def test_the_hosts_reached_follow_the_fleet_while_the_others_wait(fleet, logs):
    """One host's master is out of reach for two syncs: the other host follows the fleet's
    opening at once; the lost host's deposits go out again with the next sync, none lost;
    a blip that short is no event."""
    fleet.syncs(1)
    fleet.replies = {REACHED: OPEN, LOST: redis.ConnectionError("Connection refused")}
    assert fleet.syncs(2) == [False, False]
    assert fleet.guards[REACHED][0].state is BreakerState.OPEN
    assert fleet.guards[LOST][0].state is BreakerState.CLOSED
    fleet.replies[LOST] = CLOSED
    fleet.syncs(1)
    assert [sent[LOST].deposits for sent in fleet.sent] == [1, 1, 2, 3]
    assert [sent[REACHED].deposits for sent in fleet.sent] == [1, 1, 1, 1]
    assert _state_events(logs) == []


def test_a_master_out_of_reach_for_three_intervals_is_one_outage(fleet, logs):
    """Lost for 10 syncs: degraded from 300 ms on (one state.degraded naming the error),
    the reached host following the fleet all along; restored by the first sync that reaches
    every host."""
    fleet.syncs(1)
    fleet.replies = {REACHED: OPEN, LOST: redis.TimeoutError("Timeout reading from socket")}
    degraded = fleet.syncs(10)
    assert degraded == [False] * 3 + [True] * 7
    assert fleet.guards[REACHED][0].state is BreakerState.OPEN
    fleet.replies[LOST] = CLOSED
    assert fleet.syncs(1) == [False]
    events = _state_events(logs)
    assert [event["event"] for event in events] == ["state.degraded", "state.restored"]
    assert events[0]["error"] == "TimeoutError"


def test_every_host_out_of_reach_is_a_failed_sync_as_on_one_server(fleet, logs):
    """Both hosts unreached, one by an error reply of its own: the same outage as a Redis
    that refuses the connection, named by the error of reach, not the refusal."""
    fleet.syncs(1)
    fleet.replies = {
        REACHED: ResponseError("WRONGTYPE Operation against a key"),
        LOST: redis.ConnectionError("Connection refused"),
    }
    assert fleet.syncs(4) == [False] * 3 + [True]
    events = _state_events(logs)
    assert [event["event"] for event in events] == ["state.degraded"]
    assert events[0]["error"] == "ConnectionError"
