"""Fleet state in a real Redis Cluster (3 masters with a replica each, on loopback): the host's
keys live in one slot, the fleet's breaker opens across workers, and a master killed or a slot
moved mid-run costs no call; the fleet is followed again once the cluster has a master for the
slot."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
from devservers._resp import ReplyError
from devservers.redis_cluster import ClusterNode, RedisClusterNodes

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session._observe.hooks import StateChange, TryRecord
from resilient_session._state.fleet import push
from resilient_session._state.fleet.keys import host_keys
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .conftest import CLUSTER_NICENESS
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

Sessions = Callable[[int, dict[str, Any]], list[ResilientSession]]


def _config(cluster: RedisClusterNodes, prefix: str) -> dict[str, Any]:
    return fleet_config(prefix, mode="cluster", url=cluster.url)


def _keys(prefix: str, upstream: FlakyUpstream) -> tuple[str, str, str, str]:
    return host_keys(prefix, host_key(upstream), tagged=True)


def _open_on(first: ResilientSession, follower: ResilientSession, upstream: FlakyUpstream) -> None:
    """*first* fails THRESHOLD times and opens for the fleet; *follower*, which saw no
    failure, follows within a second and refuses its next call."""
    upstream.script("/down", Reply(503))
    for _ in range(THRESHOLD):
        assert first.get(upstream.url("/down")).status_code == 503
    key = host_key(upstream)
    wait_until(lambda: follower.health()[key].breaker.value == "open", timeout=2.0)
    with pytest.raises(CircuitOpenError):
        follower.get(upstream.url("/"))


def _other_master(cluster: RedisClusterNodes, owner: ClusterNode) -> ClusterNode:
    return next(
        node
        for node in cluster.alive()
        if node.port != owner.port and node.command("ROLE")[0] == "master"
    )


def test_the_fleet_opens_across_workers_through_the_cluster(
    redis_cluster: RedisClusterNodes,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """Four workers on the cluster send at most 2 x failure_threshold tries to a host that
    answers 503 before every one fails fast, as on one Redis; the host's keys, tagged with
    its host key, sit on the one master that holds the tag's slot, which says open."""
    upstream.script("/down", Reply(503))
    fleet = fleet_sessions(4, _config(redis_cluster, key_prefix))
    breaker, budget, _, workers = _keys(key_prefix, upstream)
    assert breaker.startswith(key_prefix + "{http://127.0.0.1:")
    master = redis_cluster.master_of(breaker)
    # Each worker's first sync reads the slot map: done before the host goes down.
    for session in fleet:
        assert session.get(upstream.url("/")).status_code == 200
    wait_until(lambda: master.command("ZCARD", workers) == 4)
    fail_until_all_fail_fast(fleet, upstream.url("/down"))
    assert THRESHOLD <= upstream.hits("/down") <= 2 * THRESHOLD
    assert [master.command("EXISTS", key) for key in (breaker, budget, workers)] == [1, 1, 1]
    assert master.command("HGET", breaker, "s") == "1"
    assert state_events(logs) == []


def test_masters_without_replicas_at_a_niceness_open_the_fleet(
    redis_cluster_masters: RedisClusterNodes,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """The push benchmark's cluster: 3 masters without replicas, each node's process at the
    niceness asked for, every one holding slots; four workers on it fail fast within
    2 x failure_threshold tries, as on the cluster with replicas."""
    cluster = redis_cluster_masters
    assert len(cluster.nodes) == 3
    for node in cluster.nodes:
        assert node.command("ROLE")[0] == "master"
        info = str(node.command("INFO", "server"))
        pid = int(info.split("process_id:")[1].split()[0])
        assert os.getpriority(os.PRIO_PROCESS, pid) == CLUSTER_NICENESS
    assert all(line.slots for line in cluster.table())
    upstream.script("/down", Reply(503))
    fleet = fleet_sessions(4, _config(cluster, key_prefix))
    for session in fleet:
        assert session.get(upstream.url("/")).status_code == 200
    fail_until_all_fail_fast(fleet, upstream.url("/down"))
    assert THRESHOLD <= upstream.hits("/down") <= 2 * THRESHOLD
    breaker = _keys(key_prefix, upstream)[0]
    assert cluster.master_of(breaker).command("HGET", breaker, "s") == "1"
    assert state_events(logs) == []


def test_a_master_killed_mid_run_costs_no_call_and_the_fleet_is_followed_after_failover(
    redis_cluster: RedisClusterNodes,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """The master of the host's slot is killed while two workers call the host every 10 ms:
    no call fails (each gets the upstream's 200), both go degraded while the slot has no
    master, a replica takes over, both are restored, and then an opening by one worker is
    written to the new master and followed by the other."""
    key = host_key(upstream)
    breaker, _, _, workers = _keys(key_prefix, upstream)
    killed = redis_cluster.master_of(breaker)
    # The url a worker starts from is a node that stays: only its first sync reads it.
    config = _config(redis_cluster, key_prefix)
    config["state"]["url"] = _other_master(redis_cluster, killed).url
    first, second = fleet_sessions(2, config)
    both = (first, second)
    with Callers([first, second], upstream.url("/")).running() as callers:
        wait_until(lambda: killed.command("ZCARD", workers) == 2)
        redis_cluster.kill(killed)
        wait_until(lambda: all(s.health()[key].state_degraded for s in both), timeout=10)
        promoted = redis_cluster.wait_failover(killed)
        wait_until(lambda: not any(s.health()[key].state_degraded for s in both), timeout=10)
    assert callers.errors == []
    assert len(callers.statuses) > 0
    assert set(callers.statuses) == {200}
    assert promoted.port != killed.port

    _open_on(first, second, upstream)
    assert promoted.command("HGET", breaker, "s") == "1"
    events = state_events(logs)
    assert events.count("state.degraded") == events.count("state.restored") == 2


def test_a_slot_moved_mid_run_is_followed_through_ask_and_moved(
    redis_cluster: RedisClusterNodes,
    key_prefix: str,
    upstream: FlakyUpstream,
    fleet_sessions: Sessions,
    logs: list[Any],
) -> None:
    """The host's slot is resharded to another master while two workers call the host. With
    its keys moved and the slot still migrating, the old master answers ASK, and each
    worker's syncs run on the new one; once the slot is the new master's, the old one answers
    MOVED, and they run there still. No call fails, nothing degrades, and an opening then is
    written to the new master and followed. The throttle is on, so that the host has all
    four keys: a migrating slot runs a multi-key script only where all of them are."""
    config = _config(redis_cluster, key_prefix)
    config["defaults"]["throttle"] = {"enabled": True}
    first, second = fleet_sessions(2, config)
    breaker, _, throttle, workers = _keys(key_prefix, upstream)
    slot = redis_cluster.slot_of(breaker)
    source = redis_cluster.master_of(breaker)
    target = _other_master(redis_cluster, source)

    def synced_since(moment: str) -> bool:
        """Both workers' syncs reached the target after *moment* (server ms)."""
        since = target.command("ZRANGEBYSCORE", workers, moment, "+inf", asking=True)
        return len(since) == 2

    with Callers([first, second], upstream.url("/")).running() as callers:
        wait_until(lambda: source.command("ZCARD", workers) == 2)
        wait_until(lambda: source.command("EXISTS", breaker, throttle) == 2)
        redis_cluster.begin_migration(slot, target)
        # The old master has the keys no more, and sends a client asking for them on.
        with pytest.raises(ReplyError, match=f"^ASK {slot} 127.0.0.1:{target.port}$"):
            source.command("EXISTS", breaker)
        wait_until(functools.partial(synced_since, _now_ms(target)))

        redis_cluster.end_migration(slot, target)
        with pytest.raises(ReplyError, match=f"^MOVED {slot} 127.0.0.1:{target.port}$"):
            source.command("EXISTS", breaker)
        wait_until(functools.partial(synced_since, _now_ms(target)))
    assert callers.errors == []
    assert set(callers.statuses) == {200}

    _open_on(first, second, upstream)
    assert target.command("HGET", breaker, "s") == "1"
    assert state_events(logs) == []


def _now_ms(node: ClusterNode) -> str:
    seconds, micros = node.command("TIME")
    return str(int(seconds) * 1000 + int(micros) // 1000)


def test_an_opening_is_pushed_to_every_worker_through_the_cluster(
    redis_cluster: RedisClusterNodes,
    key_prefix: str,
    upstream: FlakyUpstream,
) -> None:
    """Syncs a minute apart, so only the push can tell: after one worker opens the host for
    the fleet, the other, which saw no failure, hears the opening on the push listener's
    thread and refuses its next call. The publish lands on one node; the listener may be
    subscribed on another."""

    class Heard:
        def __init__(self) -> None:
            self.changes: list[tuple[str, str]] = []

        def on_try(self, record: TryRecord, /) -> None:
            """Only state changes are watched."""

        def on_transition(self, change: StateChange, /) -> None:
            self.changes.append((change.to_state.value, threading.current_thread().name))

    config = fleet_config(key_prefix, mode="cluster", url=redis_cluster.url)
    config["state"]["sync_interval_ms"] = 60_000
    heard = Heard()
    first = ResilientSession(config)
    follower = ResilientSession(config, try_hooks=[heard])
    try:
        for session in (first, follower):
            assert session.get(upstream.url("/")).status_code == 200
        channel = push.channel(key_prefix)
        # Every listener subscribed, on whichever node: PUBSUB NUMSUB is per node.
        wait_until(
            lambda: (
                sum(
                    int(node.command("PUBSUB", "NUMSUB", channel)[1])
                    for node in redis_cluster.alive()
                )
                == 2
            ),
            timeout=5.0,
        )
        upstream.script("/down", Reply(503))
        for _ in range(THRESHOLD):
            assert first.get(upstream.url("/down")).status_code == 503
        key = host_key(upstream)
        wait_until(lambda: follower.health()[key].breaker.value == "open", timeout=2.0)
        assert heard.changes == [("open", push.THREAD_NAME)]
        with pytest.raises(CircuitOpenError):
            follower.get(upstream.url("/"))
    finally:
        first.close()
        follower.close()
