"""Openings pushed to every worker, on a real redis-server: the tries a host that went down sees
after the fleet's first opening, a push missed and caught by the next sync, idle hosts that
cost no sync, the listener thread's end, forks and strangers on the channel."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import select
import socket
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from resilient_session import CircuitOpenError, ResilientSession
from resilient_session._observe.hooks import StateChange, TryRecord, TrySending
from resilient_session._state.breaker import TryResult
from resilient_session._state.fleet import inbox, push
from resilient_session._state.fleet.redis_backend import RedisBackend
from resilient_session._state.registry import HostRegistry, HostState
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config import load
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .conftest import FAST_RETRY
from .fleet_calls import subscribed

pytestmark = pytest.mark.integration

THRESHOLD = 5
INTERVAL_MS = 50
WORKERS = 8
SYNC_THREAD = "resilient-session-state-sync"


def _config(
    url: str, prefix: str, interval_ms: int = INTERVAL_MS, **breaker: Any
) -> dict[str, Any]:
    return {
        "defaults": {
            "retry": {**FAST_RETRY, "max_attempts": 1},
            "breaker": {"failure_threshold": THRESHOLD, "recovery_timeout": 30.0, **breaker},
            "throttle": {"enabled": False},
        },
        "state": {
            "backend": "redis",
            "url": url,
            "key_prefix": prefix,
            "sync_interval_ms": interval_ms,
            "timeout_ms": 100,
        },
    }


def _wait_until(check: Callable[[], bool], timeout: float = 3.0) -> None:
    """Poll *check* every 5 ms; fail the test past *timeout* seconds."""
    until = SYSTEM_CLOCK.monotonic() + timeout
    while not check():
        if SYSTEM_CLOCK.monotonic() > until:
            raise AssertionError(f"not true within {timeout} s")
        SYSTEM_CLOCK.sleep(0.005)


def _key(upstream: FlakyUpstream) -> str:
    return f"http://127.0.0.1:{upstream.port}"


def _listeners() -> int:
    return sum(thread.name == push.THREAD_NAME for thread in threading.enumerate())


class Heard:
    """The breaker changes a session's state hooks hear, each with the thread it came on."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str, str]] = []

    def on_try(self, record: TryRecord, /) -> None:
        """Tries are not what this hook watches."""

    def on_transition(self, change: StateChange, /) -> None:
        thread = threading.current_thread().name
        self.changes.append((change.host, change.to_state.value, thread))


# -- the tries after the first opening ----------------------------------------------------------


class Tally:
    """One hook on every worker: the tries sent to *path* so far, and at the fleet's first
    opening the tries sent and the upstream's hits on *path* until then."""

    def __init__(self, upstream: FlakyUpstream, path: str) -> None:
        self._upstream = upstream
        self._path = path
        self._lock = threading.Lock()
        self.sent = 0
        self.at_opening: tuple[int, int] | None = None

    def on_send(self, sending: TrySending, /) -> Sequence[tuple[str, str]]:
        if sending.url.endswith(self._path):
            with self._lock:
                self.sent += 1
        return ()

    def on_try(self, record: TryRecord, /) -> None:
        """Counted when sent."""

    def on_transition(self, change: StateChange, /) -> None:
        if change.to_state.value != "open":
            return
        with self._lock:
            if self.at_opening is None:
                self.at_opening = (self.sent, self._upstream.hits(self._path))


def test_after_the_fleets_first_opening_at_most_two_more_tries_reach_the_host(
    redis_server, admin, key_prefix, upstream, sessions
):
    """8 workers at failure_threshold 5, each calling every 40 ms, on a host that answers
    only 503: after the first worker's breaker opens, at most 2 tries reach the host besides
    those already in flight then, and every worker fails fast."""
    upstream.script("/down", Reply(503))
    tally = Tally(upstream, "/down")
    config = _config(redis_server.url, key_prefix)
    fleet = [sessions(config, tally) for _ in range(WORKERS)]
    for session in fleet:
        assert session.get(upstream.url("/")).status_code == 200
    _wait_until(subscribed(admin, key_prefix, WORKERS))
    refused = [0] * WORKERS

    def work(index: int) -> None:
        started = SYSTEM_CLOCK.monotonic()
        for number in range(200):
            due = started + (number + index / WORKERS) * 0.04
            SYSTEM_CLOCK.sleep(max(0.0, due - SYSTEM_CLOCK.monotonic()))
            try:
                fleet[index].get(upstream.url("/down"))
            except CircuitOpenError:
                refused[index] += 1
                if refused[index] >= 3:
                    return

    threads = [threading.Thread(target=work, args=(index,)) for index in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30.0)
    assert refused == [3] * WORKERS
    assert tally.at_opening is not None
    sent, hits = tally.at_opening
    in_flight = sent - hits
    after = upstream.hits("/down") - hits
    assert after <= 2 + in_flight, (after, in_flight)
    assert hits >= THRESHOLD


# -- a push missed ------------------------------------------------------------------------------


class _GatedPubSub:
    """The listener's PubSub, but each read waits while *gate* is clear (saying so in
    *waiting*): a listener thread that no core runs yet."""

    def __init__(self, real: Any, gate: threading.Event, waiting: threading.Event) -> None:
        self._real = real
        self._gate = gate
        self._waiting = waiting

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_message(self, timeout: float) -> Any:
        if not self._gate.is_set():
            self._waiting.set()
            self._gate.wait(10.0)
        return self._real.get_message(timeout=timeout)


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Every listener from now on reads through a ``_GatedPubSub``: (gate, waiting)."""
    gate, waiting = threading.Event(), threading.Event()
    gate.set()
    pubsub = RedisBackend.pubsub
    monkeypatch.setattr(
        RedisBackend, "pubsub", lambda backend: _GatedPubSub(pubsub(backend), gate, waiting)
    )
    return gate, waiting


def _held_back(
    url: str,
    admin: redis.Redis,
    prefix: str,
    upstream: FlakyUpstream,
    sessions: Callable[..., ResilientSession],
    gated: tuple[threading.Event, threading.Event],
) -> tuple[ResilientSession, RedisBackend, str]:
    """A session that has called *upstream*'s host once, whose listener is then held before
    its next read while an opening of that host is published and lies unread on its socket:
    the session, its backend and the host's key."""
    gate, waiting = gated
    session = sessions(_config(url, prefix))
    key = _key(upstream)
    assert session.get(upstream.url("/")).status_code == 200
    _wait_until(subscribed(admin, prefix, 1))
    backend = session.registry.backend
    assert isinstance(backend, RedisBackend)
    _wait_until(lambda: _known(session, key) > 0)
    gate.clear()
    waiting.clear()
    # The read under way ends within push.POLL; the next one waits at the gate.
    assert waiting.wait(2 * push.POLL + 1.0)
    admin.publish(push.channel(prefix), f"{_generation(admin, prefix, key) + 1}:30000:{key}")
    _wait_until(lambda: _pending(backend._inbox._fd))
    return session, backend, key


def _known(session: ResilientSession, key: str) -> int:
    """The fleet generation this session's breaker of *key* knows."""
    breaker: Any = session.registry.for_url(key + "/").breaker
    return int(breaker._generation)


def _generation(admin: redis.Redis, prefix: str, key: str) -> int:
    return int(admin.hget(f"{prefix}{key}:breaker", "g") or 0)


def _pending(fd: int) -> bool:
    """Whether socket *fd* holds data not read yet, at any fd."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def test_a_try_waits_for_an_opening_lying_unread_on_the_listeners_socket(
    redis_server, admin, key_prefix, upstream, sessions, gated, monkeypatch
):
    """The listener has not read the opening yet (no core has run it): the next tries, from 8
    threads at once, wait for it to, and fail fast instead of reaching the host."""
    monkeypatch.setattr(inbox, "_HEED_WITHIN", 5.0)
    session, _, key = _held_back(redis_server.url, admin, key_prefix, upstream, sessions, gated)
    hits = upstream.hits("/")
    # The listener runs again a moment after the try began to wait for it.
    threading.Timer(0.05, gated[0].set).start()
    raised: list[type[BaseException]] = []

    def call() -> None:
        try:
            session.get(upstream.url("/"))
        except Exception as error:  # noqa: BLE001 - each kind is asserted below
            raised.append(type(error))

    callers = [threading.Thread(target=call) for _ in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10.0)
    assert raised == [CircuitOpenError] * 8
    assert upstream.hits("/") == hits
    assert session.health()[key].breaker.value == "open"


@pytest.fixture
def many_fds() -> Iterator[None]:
    """More than 1,024 descriptors open (the soft limit raised for it, and put back), so the
    next socket the process opens has a number select() cannot watch."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 1_400
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}, under {need}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    fds: list[int] = []
    try:
        fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1_100)]
        yield
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_look_sees_an_opening_on_a_socket_numbered_past_1024(
    many_fds, redis_server, admin, key_prefix, upstream, sessions, gated, monkeypatch
):
    """The listener's socket is numbered past 1,024 (FD_SETSIZE, where select() stops): an
    opening lying unread on it is still seen, and the next try waits for it and fails fast."""
    monkeypatch.setattr(inbox, "_HEED_WITHIN", 5.0)
    session, backend, key = _held_back(
        redis_server.url, admin, key_prefix, upstream, sessions, gated
    )
    assert backend._inbox._fd >= 1_024
    assert inbox._unread(backend._inbox._fd)
    hits = upstream.hits("/")
    threading.Timer(0.05, gated[0].set).start()
    with pytest.raises(CircuitOpenError):
        session.get(upstream.url("/"))
    assert upstream.hits("/") == hits
    assert session.health()[key].breaker.value == "open"


def test_a_listener_that_does_not_read_is_waited_for_once_and_briefly(
    redis_server, admin, key_prefix, upstream, sessions, gated, monkeypatch
):
    """A listener that takes longer than the wait: the try goes out after it, and the next
    tries do not wait until the listener reads again; then the opening is followed."""
    monkeypatch.setattr(inbox, "_HEED_WITHIN", 0.2)
    session, backend, key = _held_back(
        redis_server.url, admin, key_prefix, upstream, sessions, gated
    )
    hits = upstream.hits("/")
    for _ in range(3):
        assert session.get(upstream.url("/")).status_code == 200
    assert upstream.hits("/") == hits + 3
    assert backend._inbox._stalled
    gated[0].set()
    _wait_until(lambda: session.health()[key].breaker.value == "open")
    assert not backend._inbox._stalled
    with pytest.raises(CircuitOpenError):
        session.get(upstream.url("/"))
    assert upstream.hits("/") == hits + 3


def test_a_push_missed_is_caught_by_the_next_sync_and_the_listener_comes_back_quietly(
    own_redis, key_prefix, upstream, sessions, logs
):
    """Subscribing refused (an ACL) and every subscriber cut off: no worker hears the opening
    pushed, and the one calling the host still follows it, from its sync, within one sync
    interval and a loaded machine's slack. Once subscribing is allowed again both listeners
    are back, and none of it logged a state event."""
    admin = redis.Redis.from_url(own_redis.url)
    upstream.script("/down", Reply(503))
    heard = Heard()
    config = _config(own_redis.url, key_prefix)
    failing = sessions(config)
    following = sessions(config, heard)
    key = _key(upstream)
    try:
        for session in (failing, following):
            assert session.get(upstream.url("/")).status_code == 200
        _wait_until(subscribed(admin, key_prefix, 2))
        admin.acl_setuser("default", enabled=True, commands=["-subscribe"])
        admin.client_kill_filter(_type="pubsub")
        _wait_until(subscribed(admin, key_prefix, 0))
        for _ in range(THRESHOLD):
            failing.get(upstream.url("/down"))
        assert failing.health()[key].breaker.value == "open"
        _wait_until(lambda: following.health()[key].breaker.value == "open", timeout=1.0)
        assert heard.changes == [(key, "open", SYNC_THREAD)]
        admin.acl_setuser("default", enabled=True, commands=["+subscribe"])
        _wait_until(subscribed(admin, key_prefix, 2))
    finally:
        admin.close()
    assert [e["event"] for e in logs if e["event"].startswith("state.")] == []


# -- idle hosts ---------------------------------------------------------------------------------


def _try(state: HostState, result: TryResult = TryResult.SUCCESS) -> None:
    """One call's one try on the host's guards, as the stages make it."""
    state.bucket.deposit()
    permit, _ = state.breaker.closed_admission or state.breaker.allow()
    assert permit is not None
    state.breaker.record(permit, result)


def _scripts_run(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_idle_hosts_cost_no_sync_and_hear_an_opening_pushed(own_redis, key_prefix):
    """300 hosts each tried once, then left: once idle, the syncs run the script for none of
    them. Another worker opens one: the idle worker follows at once, by push. Its listener
    cut off and subscribed again, it reads each idle host once, and then none again."""
    hosts = 300
    config = load(_config(own_redis.url, key_prefix))
    idle, opener = HostRegistry(config), HostRegistry(config)
    backend = idle.backend
    assert isinstance(backend, RedisBackend)
    admin = redis.Redis.from_url(own_redis.url)
    try:
        _wait_until(subscribed(admin, key_prefix, 2))
        states = [idle.for_url(f"http://h{n}.idle.test/") for n in range(hosts)]
        for state in states:
            _try(state)
        # Each host stays in use for a second after its try (the budget split's alive window).
        SYSTEM_CLOCK.sleep(1.5)
        before = _scripts_run(admin)
        SYSTEM_CLOCK.sleep(1.0)
        assert _scripts_run(admin) == before

        target = opener.for_url("http://h7.idle.test/")
        for _ in range(THRESHOLD):
            _try(target, TryResult.FAILURE)
        assert target.breaker.state.value == "open"
        _wait_until(lambda: states[7].breaker.state.value == "open", timeout=1.0)
        assert states[8].breaker.state.value == "closed"

        workers = [f"{key_prefix}http://h{n}.idle.test:80:workers" for n in range(hosts)]
        read_at = [admin.zscore(name, backend._worker) for name in workers]
        admin.client_kill_filter(_type="pubsub")
        # 100 idle reads a second at most: 300 hosts in about 3 s.
        _wait_until(
            lambda: all(
                admin.zscore(name, backend._worker) != was
                for name, was in zip(workers, read_at, strict=True)
            ),
            timeout=8.0,
        )
        SYSTEM_CLOCK.sleep(0.5)
        before = _scripts_run(admin)
        SYSTEM_CLOCK.sleep(1.0)
        assert _scripts_run(admin) - before <= 2  # the opener's host, in use for its second
        assert backend.degraded is False
    finally:
        idle.close()
        opener.close()
        admin.close()


# -- what a hold costs ---------------------------------------------------------------------------


class _Socket:
    """What Inbox.watch reads of a PubSub: its connection's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.connection = SimpleNamespace(_sock=sock)


def _held_once(followed: bool) -> tuple[float, float]:
    """A byte lies unread on a socket pair; a try looks, and is held until a listener thread
    takes in an opening followed (one read), or two messages that are none: the credit left
    after the hold, and the hold's length."""
    ours, theirs = socket.socketpair()
    look = inbox.Inbox()
    watching = threading.Event()

    def listener() -> None:
        look.watch(_Socket(ours))
        watching.set()
        until = SYSTEM_CLOCK.monotonic() + 5.0
        while not look._holding and SYSTEM_CLOCK.monotonic() < until:
            SYSTEM_CLOCK.sleep(0.001)
        SYSTEM_CLOCK.sleep(0.02)
        for _ in range(1 if followed else 2):
            look.took(followed)

    with ours, theirs:
        theirs.send(b"x")
        thread = threading.Thread(target=listener)
        thread.start()
        assert watching.wait(5.0)
        began = SYSTEM_CLOCK.monotonic()
        look.heed()
        held = SYSTEM_CLOCK.monotonic() - began
        thread.join(5.0)
    return look._credit, held


def test_a_hold_that_ends_in_an_opening_followed_is_free_and_one_that_ends_in_junk_is_paid(
    monkeypatch,
):
    """Held until the listener followed an opening: the credit (here 2 s, so that a loaded
    machine never ends a hold by its timeout) is whole after. Held until it parsed two
    messages that were none: the hold, 20 ms or more, is taken from it."""
    monkeypatch.setattr(inbox, "_HEED_WITHIN", 2.0)
    credit, held = _held_once(followed=True)
    assert 0.02 <= held < 2.0
    assert credit == pytest.approx(2.0)
    credit, held = _held_once(followed=False)
    assert 0.02 <= held < 2.0
    assert credit == pytest.approx(2.0 - held, abs=0.005)


# -- the listener thread's life -----------------------------------------------------------------


def test_close_stops_the_listener_and_drops_its_subscription(redis_server, admin, key_prefix):
    """Each redis-backed session runs one listener thread, subscribed on the prefix's channel;
    close() ends the thread and the subscription with it."""
    before = _listeners()
    made = [ResilientSession(_config(redis_server.url, key_prefix)) for _ in range(3)]
    assert _listeners() == before + 3
    _wait_until(subscribed(admin, key_prefix, 3))
    for session in made:
        session.close()
    assert _listeners() == before
    _wait_until(subscribed(admin, key_prefix, 0))


def test_a_session_dropped_without_close_stops_its_listener(redis_server, admin, key_prefix):
    """A session dropped without close() ends its listener once collected, within a second of
    the thread's next look, and the subscription goes with it."""
    before = _listeners()
    session = ResilientSession(_config(redis_server.url, key_prefix))
    _wait_until(subscribed(admin, key_prefix, 1))
    del session

    def collected() -> bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        return _listeners() == before

    _wait_until(collected, timeout=5.0)
    _wait_until(subscribed(admin, key_prefix, 0))


def test_redis_restarted_the_listener_subscribes_again_quietly(
    own_redis, key_prefix, upstream, sessions, logs
):
    """Redis killed and restarted: the listener subscribes again by itself, and the only
    state events are the outage's one degraded and one restored."""
    session = sessions(_config(own_redis.url, key_prefix))
    admin = redis.Redis.from_url(own_redis.url)
    key = _key(upstream)
    try:
        assert session.get(upstream.url("/")).status_code == 200
        _wait_until(subscribed(admin, key_prefix, 1))
        own_redis.kill()
        _wait_until(lambda: session.health()[key].state_degraded)
        own_redis.start()
        _wait_until(lambda: not session.health()[key].state_degraded)
        _wait_until(subscribed(admin, key_prefix, 1))
    finally:
        admin.close()
    assert [e["event"] for e in logs if e["event"].startswith("state.")] == [
        "state.degraded",
        "state.restored",
    ]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12 warns on fork with threads
def test_a_forked_worker_hears_openings_and_leaves_the_parentsubscribed(
    redis_server, admin, key_prefix, upstream
):
    """A session made before a fork: the child subscribes on a listener of its own and hears
    the parent's opening pushed, seconds before its next sync; once the child has exited the
    parent is still subscribed."""
    upstream.script("/down", Reply(503))
    session = ResilientSession(_config(redis_server.url, key_prefix, interval_ms=3_000))
    key = _key(upstream)
    try:
        assert session.get(upstream.url("/")).status_code == 200
        _wait_until(subscribed(admin, key_prefix, 1))
        ready, go = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status only
            code = 1
            try:
                os.close(ready)
                client = redis.Redis.from_url(redis_server.url)
                _wait_until(subscribed(client, key_prefix, 2))
                SYSTEM_CLOCK.sleep(0.2)  # past the child's first sync, which reads the fleet
                os.write(go, b"x")
                _wait_until(lambda: session.health()[key].breaker.value == "open", timeout=2.0)
                code = 0
            finally:
                os._exit(code)
        os.close(go)
        assert os.read(ready, 1) == b"x"
        os.close(ready)
        for _ in range(THRESHOLD):
            session.get(upstream.url("/down"))
        assert session.health()[key].breaker.value == "open"
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        _wait_until(subscribed(admin, key_prefix, 1))
    finally:
        session.close()


# -- strangers on the channel -------------------------------------------------------------------


class _Openings:
    """Each opening a session's hooks hear: its thread, and the host's open time read then."""

    def __init__(self) -> None:
        self.session: ResilientSession | None = None
        self.seen: list[tuple[str, float]] = []

    def on_try(self, record: TryRecord, /) -> None:
        """Only openings are watched."""

    def on_transition(self, change: StateChange, /) -> None:
        if change.to_state.value == "open" and self.session is not None:
            open_for = self.session.health()[change.host].open_for
            self.seen.append((threading.current_thread().name, open_for))


def test_what_a_stranger_publishes_costs_at_most_an_opening_until_the_next_sync(
    redis_server, admin, key_prefix, upstream, sessions
):
    """Nonsense on the channel is ignored and the listener listens on; a forged opening a
    century long opens the host for recovery_timeout_max at most, and the host's next sync
    (within an interval while it is in use, or woken by its next try) closes it again."""
    openings = _Openings()
    session = sessions(
        _config(redis_server.url, key_prefix, recovery_timeout=1.0, recovery_timeout_max=5.0),
        openings,
    )
    openings.session = session
    key = _key(upstream)
    assert session.get(upstream.url("/")).status_code == 200
    channel = push.channel(key_prefix)
    _wait_until(subscribed(admin, key_prefix, 1))
    _wait_until(lambda: _known(session, key) > 0)
    for junk in (b"", b"nonsense", b"1:2", b"x:1:" + key.encode(), b"\xff:1:h"):
        admin.publish(channel, junk)
    forged = _generation(admin, key_prefix, key) + 1
    admin.publish(channel, f"{forged}:{100 * 365 * 86_400_000}:{key}")
    # Read as it opens: while the host is in use, its next sync (50 ms on) closes it again,
    # sooner than a poll of health() on a loaded machine may look.
    _wait_until(lambda: bool(openings.seen), timeout=2.0)
    thread, open_for = openings.seen[0]
    assert thread == push.THREAD_NAME
    assert 0.0 <= open_for <= 5.0
    with contextlib.suppress(CircuitOpenError):
        session.get(upstream.url("/"))
    _wait_until(lambda: session.health()[key].breaker.value == "closed", timeout=2.0)
    assert session.get(upstream.url("/")).status_code == 200
