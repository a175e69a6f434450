"""A session made before ``os.fork()`` (a gunicorn app preloaded in the master) in the child:
connections of its own, no slot, probe or lock a parent's thread held at the fork."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from resilient_session import ResilientSession
from resilient_session._state.registry import host_key
from resilient_session._transport.fork import renew_pools
from resilient_session._transport.watched import WatchedHTTPConnectionPool
from resilient_session.adapter import ResilientAdapter
from resilient_session.clock import SYSTEM_CLOCK

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only"),
    # Python 3.12 warns on a fork while threads run; here that is the point.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

CHILDREN = 5
CALLS = 80
# Generous for a loaded 2-core machine: one loopback echo takes about a millisecond.
TRY_TIMEOUT = (5.0, 5.0)
CALLS_WITHIN = 30.0
CHILD_WAIT = 45.0
HOLD_MAX = 10.0

Report = dict[str, Any]


class _EchoServer(ThreadingHTTPServer):
    """Keep-alive HTTP/1.1 on loopback: ``/?id=X`` answers ``X``, ``/fail`` 503, and ``/hold``
    answers once :attr:`released` is set; counts connections and holds in progress."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0
        self.holding = 0
        self.released = threading.Event()

    def url(self, target: str = "/") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{target}"


class _EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60.0
    # Headers and body go out as two writes; Nagle would hold the body for the client's ACK.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        server = cast(_EchoServer, self.server)
        with server.lock:
            server.connections += 1

    def log_message(self, format: str, *args: object) -> None:
        """Silent."""

    def do_GET(self) -> None:
        server = cast(_EchoServer, self.server)
        with server.lock:
            server.requests += 1
        parts = urlsplit(self.path)
        status = 503 if parts.path == "/fail" else 200
        if parts.path == "/hold":
            with server.lock:
                server.holding += 1
            server.released.wait(HOLD_MAX)
        body = parse_qs(parts.query).get("id", [""])[0].encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo() -> Iterator[_EchoServer]:
    server = _EchoServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()
        thread.join(5.0)


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``state:`` section of each backend; the redis one on the test run's redis-server."""
    if request.param == "memory":
        return {"backend": "memory"}
    server = request.getfixturevalue("redis_server")
    prefix = request.getfixturevalue("key_prefix")
    return {"backend": "redis", "url": server.url, "key_prefix": prefix}


def _config(state: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    return {"defaults": {"retry": {"max_attempts": 1}, **sections}, "state": state}


def _fork(body: Callable[[], Report]) -> tuple[int, int]:
    """Run *body* in a child that reports its result as JSON through a pipe and exits;
    returns the child's pid and the pipe's read end."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            report: Report = body()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, never raised
            report = {"crashed": repr(exc)}
        finally:
            with contextlib.suppress(BaseException):
                os.write(write_end, json.dumps(report).encode())
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def _collect(children: list[tuple[int, int]], within: float = CHILD_WAIT) -> list[Report]:
    """Each child's report, once it exits; a child still running after *within* seconds is
    killed and reported as ``{"hung": True}``."""
    until = SYSTEM_CLOCK.monotonic() + within
    reports: list[Report] = []
    for pid, read_end in children:
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if SYSTEM_CLOCK.monotonic() > until:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            SYSTEM_CLOCK.sleep(0.01)
        ready, _, _ = select.select([read_end], [], [], 0)
        raw = os.read(read_end, 1 << 16) if ready else b""
        os.close(read_end)
        reports.append(json.loads(raw) if raw else {"hung": True, "pid": pid})
    return reports


def _echo_calls(session: ResilientSession, echo: _EchoServer, tag: str) -> Report:
    """CALLS calls, one after another, each asking for its own id back: how many answers were
    another's, how many calls failed, and the first failure."""
    mismatches = errors = 0
    first_error = None
    until = SYSTEM_CLOCK.monotonic() + CALLS_WITHIN
    for number in range(CALLS):
        if SYSTEM_CLOCK.monotonic() > until:
            errors += CALLS - number
            first_error = first_error or "out of time"
            break
        wanted = f"{tag}-{number}"
        try:
            answer = session.get(echo.url(f"/?id={wanted}"), timeout=TRY_TIMEOUT).text
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors += 1
            first_error = first_error or repr(exc)
            continue
        mismatches += answer != wanted
    return {"mismatches": mismatches, "errors": errors, "first_error": first_error}


def _wait_for(check: Callable[[], bool], within: float = 5.0) -> None:
    until = SYSTEM_CLOCK.monotonic() + within
    while not check():
        if SYSTEM_CLOCK.monotonic() > until:
            raise AssertionError(f"not true within {within} s")
        SYSTEM_CLOCK.sleep(0.005)


def test_forked_children_and_the_parent_each_get_their_own_answers(echo, state):
    """A session with a pooled keep-alive connection, forked five times: the children and the
    parent make 80 calls each at once, and every answer is the caller's own; the parent keeps
    its connection and each child opens one of its own."""
    session = ResilientSession(_config(state))
    go_read, go_write = os.pipe()

    def child(tag: str) -> Report:
        ready, _, _ = select.select([go_read], [], [], CHILD_WAIT)
        if not ready:
            return {"crashed": "never told to go"}
        return _echo_calls(session, echo, tag)

    try:
        for number in range(3):
            assert session.get(echo.url(f"/?id=warm-{number}")).text == f"warm-{number}"
        assert echo.connections == 1
        children = [_fork(functools.partial(child, f"child{n}")) for n in range(CHILDREN)]
        os.write(go_write, b"go")  # readable from now on: every child starts
        mine = _echo_calls(session, echo, "parent")
        reports = _collect(children)
    finally:
        os.close(go_read)
        os.close(go_write)
        session.close()
    expected = {"mismatches": 0, "errors": 0, "first_error": None}
    assert [*reports, mine] == [expected] * (CHILDREN + 1)
    assert echo.requests == 3 + (CHILDREN + 1) * CALLS
    assert echo.connections == 1 + CHILDREN


def _call_once(session: ResilientSession, echo: _EchoServer) -> Report:
    """One call from the child: the answer or the error, and the host's health before it."""
    health = session.health()[host_key(echo.url())[0]]
    before = {"in_flight": health.in_flight, "breaker": health.breaker.value}
    try:
        return {**before, "answer": session.get(echo.url("/?id=child"), timeout=5).text}
    except Exception as exc:  # noqa: BLE001 - reported
        return {**before, "answer": type(exc).__name__}


def _holding(session: ResilientSession, echo: _EchoServer, count: int) -> list[threading.Thread]:
    """*count* parent threads, each in a call to ``/hold`` the server is holding."""
    threads = [
        threading.Thread(target=session.get, args=(echo.url("/hold"),), kwargs={"timeout": 20})
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    _wait_for(lambda: echo.holding == count)
    return threads


@pytest.mark.parametrize("held", ["limit_slots", "probe"])
def test_what_a_parents_thread_holds_at_the_fork_is_not_the_childs(echo, state, held):
    """Tries in flight on a parent's threads at the fork never end in the child: the child
    starts with every concurrency-limit slot free and its half-open probe slot free, so its
    first call is sent and answered."""
    if held == "limit_slots":
        sections: dict[str, Any] = {"limit": {"initial": 2, "min": 2, "max": 2, "max_wait": 0.2}}
    else:
        sections = {"breaker": {"failure_threshold": 1, "recovery_timeout": 0.1}}
    session = ResilientSession(_config(state, **sections))
    threads: list[threading.Thread] = []
    try:
        if held == "probe":
            assert session.get(echo.url("/fail")).status_code == 503
            # Well past recovery_timeout: the next try is the probe. With the redis backend the
            # fleet's opening runs from when the sync brought it to Redis, later on a loaded
            # machine; one still running when the reply comes would reopen the breaker.
            SYSTEM_CLOCK.sleep(1.0)
        threads = _holding(session, echo, 2 if held == "limit_slots" else 1)
        children = [_fork(lambda: _call_once(session, echo))]
        # The parent's tries end only once the child has reported: a parent's probe answered
        # first closes the fleet's breaker, which a redis-backed child then rightly follows.
        reports = _collect(children)
        echo.released.set()
    finally:
        echo.released.set()
        for thread in threads:
            thread.join(HOLD_MAX)
        session.close()
    breaker = "half_open" if held == "probe" else "closed"
    assert reports == [{"in_flight": 0, "breaker": breaker, "answer": "child"}]


def test_a_lock_a_parents_thread_held_at_the_fork_is_free_in_the_child(echo, state):
    """A parent's thread inside the registry or a host's guard at the fork (each holds its
    lock for a moment) leaves the child's locks free: the child's calls return."""
    session = ResilientSession(_config(state))
    assert session.get(echo.url("/?id=warm")).text == "warm"
    host = session.registry.for_url(echo.url())
    owners = [session.registry, host.breaker, host.bucket, host.throttle, host.limit]
    locks = [owner._lock for owner in owners if owner is not None]  # type: ignore[attr-defined]
    locks += [getattr(host.breaker, "_batch_lock", threading.Lock())]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            held.set()
            release.wait(HOLD_MAX)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5.0)

        def child() -> Report:
            return {
                "known": session.get(echo.url("/?id=known"), timeout=5).text,
                "new": session.registry.for_url("http://child.test/").key,
            }

        children = [_fork(child)]
        release.set()
        reports = _collect(children, within=15.0)
    finally:
        release.set()
        holder.join(HOLD_MAX)
        session.close()
    assert reports == [{"known": "known", "new": "http://child.test:80"}]


def test_renewed_pools_keep_the_adapters_settings_and_close_only_idle_connections(echo):
    """What a child does to each adapter, done in place: a new, empty, watched pool manager
    of the adapter's own sizes, no proxy manager, and the old idle connection closed (this
    pins the private attributes of requests and urllib3 that fork.py reads)."""
    adapter = ResilientAdapter(pool_connections=3, pool_maxsize=7, pool_block=True)
    with requests.Session() as session:
        session.mount("http://", adapter)
        assert session.get(echo.url("/?id=a"), timeout=5).text == "a"
        old = adapter.poolmanager
        (pool,) = old.pools._container.values()
        idle = [conn for conn in pool.pool.queue if conn is not None]
        assert len(idle) == 1
        assert idle[0].sock is not None
        adapter.proxy_manager_for("http://127.0.0.1:9")  # made on demand, never connected
        renew_pools(adapter)
        fresh = adapter.poolmanager
        assert (fresh is old, len(fresh.pools), adapter.proxy_manager) == (False, 0, {})
        assert (fresh.connection_pool_kw["maxsize"], fresh.connection_pool_kw["block"]) == (7, True)
        assert fresh.pools._maxsize == 3
        assert fresh.pool_classes_by_scheme["http"] is WatchedHTTPConnectionPool
        assert idle[0].sock is None
        assert session.get(echo.url("/?id=b"), timeout=5).text == "b"
    assert echo.connections == 2


def test_a_plain_adapter_mounted_on_the_session_is_renewed_in_the_child_too(echo):
    """A requests ``HTTPAdapter`` mounted on a ResilientSession starts empty in the child as
    well: the child connects anew, and the parent's next call still uses its connection."""
    session = ResilientSession(_config({"backend": "memory"}))
    plain = requests.adapters.HTTPAdapter()
    session.mount(echo.url("/plain"), plain)
    try:
        assert session.get(echo.url("/plain?id=p"), timeout=5).text == "p"

        def child() -> Report:
            pools = len(plain.poolmanager.pools)
            return {"pools": pools, "answer": session.get(echo.url("/plain?id=c"), timeout=5).text}

        reports = _collect([_fork(child)])
        assert session.get(echo.url("/plain?id=q"), timeout=5).text == "q"
    finally:
        session.close()
    assert reports == [{"pools": 0, "answer": "c"}]
    assert echo.connections == 2
