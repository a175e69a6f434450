"""Fleet state on a real redis-server: sessions that each stand for a worker process share one
breaker, budget and throttle per host, and a Redis that dies, hangs or forgets costs no call."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import pickle
import random
import threading
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis
import requests

from resilient_session import CircuitOpenError, ResilientSession, log_json_lines
from resilient_session._state.breaker import BreakerState, TryResult
from resilient_session._state.fleet.breaker import FleetBreaker, StateCode
from resilient_session._state.fleet.budget import FleetBucket
from resilient_session._state.fleet.link import ServerLink
from resilient_session._state.fleet.lua import SYNC
from resilient_session._state.fleet.redis_backend import RedisBackend
from resilient_session._state.fleet.sync_batch import SyncedHost, take_batch, take_in
from resilient_session._state.registry import HostRegistry
from resilient_session.adapter import ResilientAdapter
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config import load
from resilient_session.config.policy import BreakerPolicy, HostPolicy
from resilient_session.testing import FakeClock
from resilient_session.testing.upstream import FlakyUpstream, Reply
from tests.threads import run_together

from .conftest import FAST_RETRY
from .fleet_calls import fail_until_all_fail_fast, wait_until

pytestmark = pytest.mark.integration

INTERVAL_MS = 50
THRESHOLD = 10
SYNC_THREAD = "resilient-session-state-sync"
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "events.schema.json"


def _config(
    url: str,
    prefix: str,
    backend: str = "redis",
    interval_ms: int = INTERVAL_MS,
    timeout_ms: int = 20,
    **sections: Any,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "retry": {**FAST_RETRY, "max_attempts": 1},
        "breaker": {"failure_threshold": THRESHOLD, "recovery_timeout": 30.0},
        "throttle": {"enabled": False},
    }
    for name, values in sections.items():
        defaults[name] = {**defaults.get(name, {}), **values}
    state = {
        "backend": backend,
        "url": url,
        "key_prefix": prefix,
        "sync_interval_ms": interval_ms,
        "timeout_ms": timeout_ms,
    }
    return {"defaults": defaults, "state": state}


def test_the_fleet_opens_after_about_one_threshold_of_failures(
    redis_server, key_prefix, upstream, fleet_sessions
):
    """Four workers on one Redis send at most 2 x failure_threshold tries to a host that
    answers 503 before every one fails fast; on the memory backend each needs its own 10."""
    upstream.script("/down", Reply(503))
    fleet = fleet_sessions(4, _config(redis_server.url, key_prefix))
    fail_until_all_fail_fast(fleet, upstream.url("/down"))
    fleet_hits = upstream.hits("/down")
    assert THRESHOLD <= fleet_hits <= 2 * THRESHOLD

    local = fleet_sessions(4, _config(redis_server.url, key_prefix, backend="memory"))
    fail_until_all_fail_fast(local, upstream.url("/down"))
    assert upstream.hits("/down") - fleet_hits == 4 * THRESHOLD
    assert all(session.health()[_key(upstream)].state_backend == "redis" for session in fleet)


def _key(upstream: FlakyUpstream) -> str:
    return f"http://127.0.0.1:{upstream.port}"


def test_an_opening_reaches_an_idle_worker_within_one_sync_interval(
    redis_server, key_prefix, upstream, fleet_sessions, logs
):
    """A worker that never saw a failure follows the fleet's opening within one sync interval
    (plus a loaded machine's slack), and logs its own breaker.transition."""
    upstream.script("/down", Reply(503))
    failing, idle = fleet_sessions(2, _config(redis_server.url, key_prefix, interval_ms=100))
    assert idle.get(upstream.url("/")).status_code == 200
    key = _key(upstream)
    for _ in range(THRESHOLD):
        failing.get(upstream.url("/down"))
    opened = wait_until(lambda: failing.health()[key].breaker.value == "open", timeout=2.0)
    reached = wait_until(lambda: idle.health()[key].breaker.value == "open", timeout=2.0)
    assert opened + reached <= 0.1 + 0.4
    with pytest.raises(CircuitOpenError):
        idle.get(upstream.url("/"))
    assert upstream.hits("/") == 1
    opens = [e for e in logs if e["event"] == "breaker.transition" and e["to"] == "open"]
    assert len(opens) == 2


def test_the_fleet_shares_one_retry_budget(redis_server, key_prefix, upstream, fleet_sessions):
    """Four workers whose bucket holds 8 tokens and earns none share it against a host that
    always answers 503; four memory buckets retry 32 times.

    Each worker holds a quarter of the fleet's tokens and a retry takes a whole one, so up
    to a token per worker can sit unspent until the next sync: at least 4 retries. A share is
    not a lease (docs/fleet.md): retries between syncs may spend up to a second bucket, so
    the bound that holds whatever the timing is 16, still half of four memory buckets."""
    upstream.script("/flaky", Reply(503))
    sections: dict[str, Any] = {
        "retry": {"max_attempts": 4},
        "budget": {"ratio": 0.0, "min_per_second": 0.0, "max_tokens": 8},
        "breaker": {"failure_threshold": 10_000},
    }
    fleet = fleet_sessions(4, _config(redis_server.url, key_prefix, **sections))
    local = fleet_sessions(4, _config(redis_server.url, key_prefix, backend="memory", **sections))
    for session in fleet + local:
        assert session.get(upstream.url("/")).status_code == 200
    # Every worker has synced at least twice: each knows the fleet has four.
    SYSTEM_CLOCK.sleep(3 * INTERVAL_MS / 1000)
    key = _key(upstream)
    for group in (fleet, local):
        for _ in range(10):
            for session in group:
                assert session.get(upstream.url("/flaky")).status_code == 503
    fleet_retries = sum(session.health()[key].retries for session in fleet)
    local_retries = sum(session.health()[key].retries for session in local)
    assert 4 <= fleet_retries <= 16
    assert local_retries == 32


def test_redis_killed_paused_and_restarted_under_load_costs_no_call(
    own_redis, key_prefix, upstream, fleet_sessions, logs
):
    """Killed for 0.6 s, restarted, then paused (SIGSTOP) for 0.6 s, Redis costs no call of
    two workers' four threads; each worker logs one state.degraded and one state.restored per
    outage, and health says degraded only during them.

    The timeout is 100 ms, not 20: two test runs on two busy cores can hold a healthy Redis
    past 20 ms for longer than a blip, which is an outage of its own, and logged as one."""
    fleet = fleet_sessions(2, _config(own_redis.url, key_prefix, timeout_ms=100))
    key = _key(upstream)
    stop = threading.Event()
    errors: list[BaseException] = []
    calls = [0]

    def load(session: ResilientSession) -> None:
        while not stop.is_set():
            try:
                assert session.get(upstream.url("/"), timeout=2.0).status_code == 200
                calls[0] += 1
            except (requests.RequestException, AssertionError) as exc:
                errors.append(exc)
            SYSTEM_CLOCK.sleep(0.002)

    threads = [threading.Thread(target=load, args=(s,)) for s in fleet for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: all(key in s.health() for s in fleet))
        SYSTEM_CLOCK.sleep(0.3)
        own_redis.kill()
        wait_until(lambda: all(s.health()[key].state_degraded for s in fleet))
        SYSTEM_CLOCK.sleep(0.6)
        own_redis.start()
        wait_until(lambda: not any(s.health()[key].state_degraded for s in fleet))
        SYSTEM_CLOCK.sleep(0.3)
        own_redis.pause()
        wait_until(lambda: all(s.health()[key].state_degraded for s in fleet))
        SYSTEM_CLOCK.sleep(0.6)
        own_redis.resume()
        wait_until(lambda: not any(s.health()[key].state_degraded for s in fleet))
        SYSTEM_CLOCK.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert errors == []
    assert calls[0] > 100
    names = [e["event"] for e in logs if e["event"].startswith("state.")]
    assert names.count("state.degraded") == names.count("state.restored") == 4
    degraded = [e for e in logs if e["event"] == "state.degraded"]
    assert {e["error"] for e in degraded} <= {"ConnectionError", "TimeoutError"}
    # The restarted server learnt the host again from the workers' syncs.
    client = redis.Redis.from_url(own_redis.url)
    try:
        assert client.exists(f"{key_prefix}{key}:breaker") == 1
    finally:
        client.close()


def test_protection_is_back_within_a_sync_interval_of_a_restart(
    own_redis, key_prefix, upstream, fleet_sessions
):
    """After Redis was killed and came back empty, the fleet again opens on about one
    threshold of failures: the script rebuilds every key from the workers' reports."""
    upstream.script("/down", Reply(503))
    fleet = fleet_sessions(3, _config(own_redis.url, key_prefix))
    for session in fleet:
        assert session.get(upstream.url("/")).status_code == 200
    key = _key(upstream)
    own_redis.kill()
    wait_until(lambda: all(s.health()[key].state_degraded for s in fleet))
    own_redis.start()
    wait_until(lambda: not any(s.health()[key].state_degraded for s in fleet))
    fail_until_all_fail_fast(fleet, upstream.url("/down"))
    assert THRESHOLD <= upstream.hits("/down") <= 2 * THRESHOLD


def test_a_flushed_redis_keeps_an_open_breaker_open(
    redis_server, key_prefix, upstream, fleet_sessions
):
    """FLUSHALL and SCRIPT FLUSH while the fleet's breaker is open: the next sync reloads the
    script and recreates the key from a
    worker's own open breaker, and no worker closes or errs."""
    upstream.script("/down", Reply(503))
    fleet = fleet_sessions(2, _config(redis_server.url, key_prefix))
    fail_until_all_fail_fast(fleet, upstream.url("/down"))
    hits = upstream.hits("/down")
    key = _key(upstream)
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
        client.script_flush()
        breaker_key = f"{key_prefix}{key}:breaker"
        wait_until(lambda: client.exists(breaker_key) == 1)
        assert client.hget(breaker_key, "s") == b"1"
        assert 0 < client.pttl(breaker_key) <= 300_000
    finally:
        client.close()
    SYSTEM_CLOCK.sleep(3 * INTERVAL_MS / 1000)
    for session in fleet:
        assert session.health()[key].breaker.value == "open"
        with pytest.raises(CircuitOpenError):
            session.get(upstream.url("/down"))
    assert upstream.hits("/down") == hits


def test_an_unreachable_redis_degrades_once_and_never_shows_its_password(own_redis, upstream, logs):
    """With nothing listening at the URL, calls go on as on the memory backend; one
    state.degraded is logged, its url without the password, and health says degraded."""
    server = own_redis
    server.stop()  # its port, free now
    url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
    with ResilientSession(_config(url, "t:")) as session:
        for _ in range(5):
            assert session.get(upstream.url("/")).status_code == 200
            SYSTEM_CLOCK.sleep(INTERVAL_MS / 1000)
        key = _key(upstream)
        wait_until(lambda: session.health()[key].state_degraded, timeout=3.0)
    degraded = [e for e in logs if e["event"] == "state.degraded"]
    assert degraded == [
        {
            "event": "state.degraded",
            "log_level": "warning",
            "backend": "redis",
            "url": f"redis://127.0.0.1:{server.port}/0",
            "error": "ConnectionError",
        }
    ]
    assert "s3cret" not in repr(logs)
    assert upstream.hits("/") == 5


def test_close_stops_the_sync_thread(redis_server, key_prefix):
    """Each redis-backed session (or adapter that made its own state) runs one sync thread,
    and close() ends it; an unpickled copy runs one of its own."""

    def running() -> int:
        return sum(thread.name == SYNC_THREAD for thread in threading.enumerate())

    before = running()
    sessions = [ResilientSession(_config(redis_server.url, key_prefix)) for _ in range(3)]
    assert running() == before + 3
    # A copy read back from a pickle has fresh state: one thread of its own, no more.
    sessions.append(pickle.loads(pickle.dumps(sessions[0])))  # noqa: S301 - our own bytes
    assert running() == before + 4
    # An adapter mounted on a plain requests.Session closes the registry it made.
    plain = requests.Session()
    plain.mount("http://", ResilientAdapter(_config(redis_server.url, key_prefix)))
    assert running() == before + 5
    plain.close()
    for session in sessions:
        session.close()
    assert running() == before


def test_a_session_dropped_without_close_stops_its_sync_thread(redis_server, key_prefix, upstream):
    """A redis-backed session that served calls and is dropped without close() ends its sync
    thread once collected: the thread holds its backend only weakly, between syncs (a sync
    running during one collection leaves it to the next). Its sockets are left to the
    collector, with requests' ResourceWarning, as for any session dropped unclosed."""

    def running() -> int:
        return sum(thread.name == SYNC_THREAD for thread in threading.enumerate())

    def collected() -> bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        return running() == before

    before = running()
    session = ResilientSession(_config(redis_server.url, key_prefix))
    assert session.get(upstream.url("/")).status_code == 200
    assert running() == before + 1
    del session
    wait_until(collected, timeout=5.0)


def test_state_events_match_the_schema(own_redis, key_prefix, upstream):
    """state.degraded and state.restored as log_json_lines renders them validate against
    docs/events.schema.json."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    stream = io.StringIO()
    log_json_lines(stream)
    with ResilientSession(_config(own_redis.url, key_prefix, timeout_ms=100)) as session:
        assert session.get(upstream.url("/")).status_code == 200
        key = _key(upstream)
        own_redis.kill()
        wait_until(lambda: session.health()[key].state_degraded)
        own_redis.start()
        wait_until(lambda: not session.health()[key].state_degraded)
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    changes = [event for event in events if event["event"].startswith("state.")]
    assert [event["event"] for event in changes] == ["state.degraded", "state.restored"]
    assert [list(validator.iter_errors(event)) for event in events] == [[]] * len(events)
    assert not validator.is_valid({**changes[0], "error": None})
    assert not validator.is_valid({**changes[1], "degraded_for": -1})


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12 warns on fork with threads
def test_a_forked_worker_syncs_as_a_worker_of_its_own(redis_server, key_prefix, upstream):
    """A session made before a fork (a preloaded gunicorn app) syncs from the child too, with a
    worker id of its own: the host's workers set holds parent and child."""
    session = ResilientSession(_config(redis_server.url, key_prefix))
    try:
        assert session.get(upstream.url("/")).status_code == 200
        workers_key = f"{key_prefix}{_key(upstream)}:workers"
        client = redis.Redis.from_url(redis_server.url)
        wait_until(lambda: client.zcard(workers_key) == 1)
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status only
            code = 1
            try:
                session.get(upstream.url("/"))
                wait_until(lambda: client.zcard(workers_key) == 2, timeout=5.0)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.zcard(workers_key) == 2
        client.close()
    finally:
        session.close()


def test_one_workers_probe_closes_the_breaker_for_the_fleet(
    redis_server, key_prefix, upstream, fleet_sessions, logs
):
    """After the fleet's opening runs out and the host heals, the first worker's successful
    probe closes every worker's breaker: the idle worker closes without a probe of its own."""
    upstream.script("/flaky", Reply(503), Reply(503), Reply(200))
    sections: dict[str, Any] = {"breaker": {"failure_threshold": 2, "recovery_timeout": 0.3}}
    prober, idle = fleet_sessions(2, _config(redis_server.url, key_prefix, **sections))
    key = _key(upstream)
    assert idle.get(upstream.url("/")).status_code == 200
    prober.get(upstream.url("/flaky"))
    prober.get(upstream.url("/flaky"))
    wait_until(lambda: idle.health()[key].breaker.value == "open", timeout=2.0)
    SYSTEM_CLOCK.sleep(0.35)
    assert prober.get(upstream.url("/flaky")).status_code == 200
    wait_until(lambda: idle.health()[key].breaker.value == "closed", timeout=2.0)
    assert upstream.hits("/flaky") == 3
    assert upstream.hits("/") == 1
    moves = [(e["from"], e["to"]) for e in logs if e["event"] == "breaker.transition"]
    # The prober: closed -> open -> half_open -> closed; the idle one: closed -> open -> closed.
    assert sorted(moves) == sorted(
        [
            ("closed", "open"),
            ("open", "half_open"),
            ("half_open", "closed"),
            ("closed", "open"),
            ("open", "closed"),
        ]
    )


def test_the_throttle_refuses_on_the_fleets_window(
    redis_server, key_prefix, upstream, fleet_sessions
):
    """A worker that sent only 5 tries of its own, all answered, is throttled when the fleet's
    window holds another worker's failures: it refuses from the fleet's refusal chance, where
    its own window (under min_tries) would refuse nothing."""
    upstream.script("/down", Reply(503))
    sections: dict[str, Any] = {
        "throttle": {"enabled": True, "min_tries": 20},
        "breaker": {"failure_threshold": 10_000},
    }
    busy, quiet = fleet_sessions(2, _config(redis_server.url, key_prefix, **sections))
    key = _key(upstream)
    for _ in range(5):
        assert quiet.get(upstream.url("/")).status_code == 200
    for _ in range(40):
        with contextlib.suppress(CircuitOpenError):  # the busy worker is throttled too
            busy.get(upstream.url("/down"))
    # (45 tries - 2 x 5 accepts) / 46 at most; what the quiet worker read from the fleet.
    wait_until(lambda: quiet.health()[key].throttle_probability > 0.5, timeout=2.0)
    assert quiet.health()[key].throttle_probability <= 35 / 46
    # Ten more calls leave its own window at 15 tries, under min_tries: alone it could refuse
    # none. Each accepted one lowers the fleet's chance a little; ten in a row all let through
    # at about 0.7 falling to 0.4 would happen about once in 10,000 runs.
    refused = 0
    for _ in range(10):
        try:
            quiet.get(upstream.url("/"))
        except CircuitOpenError:
            refused += 1
    assert refused >= 1
    assert upstream.hits("/") == 5 + 10 - refused


def test_the_registry_and_its_redis_backend_under_many_threads(redis_server, key_prefix):
    """16 threads x 300 lookups over 80 hosts, with failures recorded, against a registry of
    at most 50 hosts while its sync thread runs: the backend keeps exactly the registry's hosts
    in step, and every one of them reaches Redis."""
    config = load({**_config(redis_server.url, key_prefix), "registry": {"max_hosts": 50}})
    registry = HostRegistry(config)
    try:

        def body(index: int) -> None:
            for number in range(300):
                state = registry.for_url(f"http://h{(index * 7 + number) % 80}.test/x")
                permit, _ = state.breaker.allow()
                if permit is not None:
                    state.breaker.record(permit, TryResult.FAILURE)

        run_together(16, body)
        backend = registry.backend
        assert isinstance(backend, RedisBackend)
        kept = set(registry.health())
        assert len(kept) == 50
        wait_until(lambda: set(backend.synced()) == kept)
        client = redis.Redis.from_url(redis_server.url)
        try:
            wait_until(lambda: all(client.exists(f"{key_prefix}{key}:breaker") for key in kept))
        finally:
            client.close()
    finally:
        registry.close()


def test_a_redis_that_refuses_every_write_is_an_outage(own_redis, key_prefix, upstream, logs):
    """A Redis that answers but refuses every script (out of memory under noeviction; a
    primary demoted to a read-only replica answers alike) shares nothing: the worker logs one
    state.degraded naming the error, health says degraded, and one state.restored when the
    writes are accepted again. Calls go on throughout."""
    key = _key(upstream)
    admin = redis.Redis.from_url(own_redis.url)
    try:
        with ResilientSession(_config(own_redis.url, key_prefix, timeout_ms=100)) as session:
            assert session.get(upstream.url("/")).status_code == 200
            wait_until(lambda: admin.exists(f"{key_prefix}{key}:breaker") == 1)
            admin.config_set("maxmemory", 1)
            wait_until(lambda: session.health()[key].state_degraded, timeout=3.0)
            assert session.get(upstream.url("/")).status_code == 200
            admin.config_set("maxmemory", 0)
            wait_until(lambda: not session.health()[key].state_degraded, timeout=3.0)
    finally:
        admin.close()
    changes = [(e["event"], e.get("error")) for e in logs if e["event"].startswith("state.")]
    assert changes == [("state.degraded", "OutOfMemoryError"), ("state.restored", None)]
    assert upstream.hits("/") == 2


def test_a_host_whose_key_redis_refuses_runs_on_its_own_state(redis_server, key_prefix):
    """A host whose breaker key something else overwrote (WRONGTYPE on every sync) forgets the
    fleet's run of failures it last read, 9 of 10, and counts its own from then on: one failure
    after a success leaves it closed, where the stale run would open it. Another host's syncs
    go on, so the process is not degraded."""
    config = load(_config(redis_server.url, key_prefix))
    registry = HostRegistry(config)
    client = redis.Redis.from_url(redis_server.url)
    try:
        broken = registry.for_url("http://broken.test/")
        registry.for_url("http://healthy.test/")
        breaker_key = f"{key_prefix}http://broken.test:80:breaker"
        for _ in range(THRESHOLD - 1):
            permit, _ = broken.breaker.allow()
            assert permit is not None
            broken.breaker.record(permit, TryResult.FAILURE)
        wait_until(lambda: client.hget(breaker_key, "f") == b"9")
        SYSTEM_CLOCK.sleep(3 * INTERVAL_MS / 1000)  # the reply with the run of 9 taken in
        client.delete(breaker_key)
        client.set(breaker_key, "not a hash")
        SYSTEM_CLOCK.sleep(3 * INTERVAL_MS / 1000)  # syncs that end in WRONGTYPE
        for result in (TryResult.SUCCESS, TryResult.FAILURE):
            permit, _ = broken.breaker.allow()
            assert permit is not None
            broken.breaker.record(permit, result)
        assert broken.breaker.state.value == "closed"
        assert registry.backend.degraded is False
    finally:
        client.close()
        registry.close()


def test_close_never_raises_a_redis_error(redis_server, key_prefix, upstream, monkeypatch):
    """close() drops the client's connections on the caller's thread; a redis-py error there
    (ChildDeadlockedError: a pool whose fork lock a parent's thread held) ends at the backend,
    and the sync thread is stopped all the same."""
    session = ResilientSession(_config(redis_server.url, key_prefix))
    assert session.get(upstream.url("/")).status_code == 200
    backend = session.registry.backend
    assert isinstance(backend, RedisBackend)

    def deadlocked(*args: object, **kwargs: object) -> None:
        raise redis.exceptions.ChildDeadlockedError

    link = backend._link
    assert isinstance(link, ServerLink)
    monkeypatch.setattr(link.client.connection_pool, "disconnect", deadlocked)
    session.close()
    assert backend.closed
    assert not backend._thread.is_alive()
    # The connections the refused close() left open, closed: none is left to the collector.
    monkeypatch.undo()
    link.client.connection_pool.disconnect()


def test_a_flushed_redis_rebuilt_by_a_probing_worker_keeps_the_fleet_open(redis_server, key_prefix):
    """After a flush, the first worker to report is probing (half open, its opening already
    told to the fleet): the script rebuilds the breaker open with nothing left, not closed, so
    a worker still open follows a fleet that probes, and is not closed without any probe."""
    clock = FakeClock()
    policy = HostPolicy(breaker=BreakerPolicy(failure_threshold=2, recovery_timeout=1.0))
    key = "http://probed.test:80"
    client = redis.Redis.from_url(redis_server.url)

    def sync(breaker: FleetBreaker, worker: str) -> None:
        host = SyncedHost.of(
            key, key_prefix, policy, breaker, FleetBucket(policy.budget, clock), None
        )
        batch = take_batch(host, worker, 1_000, random.Random(0))
        take_in(host, batch, client.eval(SYNC, len(host.keys), *host.keys, *batch.args))

    def breaker() -> FleetBreaker:
        return FleetBreaker(key, policy.breaker, clock, random.Random(0), lambda: None)

    try:
        probing, still_open = breaker(), breaker()
        for _ in range(2):
            permit, _ = probing.allow()
            assert permit is not None
            probing.record(permit, TryResult.FAILURE)
        sync(probing, "probing")  # its opening reaches the fleet
        still_open.adopt(StateCode.OPEN, 5.0, generation=7)
        clock.advance(1.0)
        permit, _ = probing.allow()
        assert permit is not None
        assert permit.probe
        client.delete(*(f"{key_prefix}{key}:{part}" for part in ("breaker", "budget", "workers")))
        sync(probing, "probing")
        assert client.hget(f"{key_prefix}{key}:breaker", "s") == b"1"
        sync(still_open, "still-open")
        assert still_open.state is BreakerState.OPEN
        assert probing.state is BreakerState.HALF_OPEN
    finally:
        client.close()


def test_a_password_a_url_parser_splits_never_reaches_an_event(upstream, logs):
    """A password whose unescaped "/" a URL parser takes for the end of the authority, with
    digits before it read as a port (here nothing listens on it): the state.degraded event
    shows the URL from its last "@" on, no part of the password."""
    url = "redis://:1/s3cret@127.0.0.1:1/0"
    with ResilientSession(_config(url, "t:")) as session:
        assert session.get(upstream.url("/")).status_code == 200
        wait_until(lambda: session.health()[_key(upstream)].state_degraded)
    degraded = [e for e in logs if e["event"] == "state.degraded"]
    assert [e["url"] for e in degraded] == ["redis://127.0.0.1:1/0"]
    assert "s3cret" not in repr(logs)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12 warns on fork with threads
def test_a_fork_during_a_sync_leaves_the_child_no_lock_held(redis_server, key_prefix):
    """A fork while the sync thread holds a lock of the registry (or of a guard, or redis-py's
    pool) would leave that lock held forever in the child, and its first call to a new host
    would hang. A fork waits for a sync in flight to end: the child's lookup returns."""
    registry = HostRegistry(load(_config(redis_server.url, key_prefix)))
    backend = registry.backend
    assert isinstance(backend, RedisBackend)
    inside = threading.Event()
    hosts_now = registry.guards

    def slow_hosts_now() -> Any:
        with registry._lock:  # as guards() holds it, only longer, so the fork lands inside
            inside.set()
            SYSTEM_CLOCK.sleep(0.3)
        return hosts_now()

    try:
        backend.serve(slow_hosts_now)
        assert inside.wait(5.0)
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status only
            code = 1
            try:
                registry.for_url("http://child.test/")
                code = 0
            finally:
                os._exit(code)
        until = SYSTEM_CLOCK.monotonic() + 5.0
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if SYSTEM_CLOCK.monotonic() > until:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError("the child's first lookup hung on a lock held at the fork")
            SYSTEM_CLOCK.sleep(0.01)
        assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        registry.close()
