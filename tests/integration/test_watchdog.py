"""The watchdog against real sockets: a try that trickles is cut at the deadline, a healthy one
keeps its pooled connection."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import pytest
import requests
from urllib3.connection import HTTPConnection

from resilient_session import DeadlineExceeded
from resilient_session._transport import watched as watched_module
from resilient_session._transport.watchdog import FIRED, WATCHDOG, Watch, Watchdog
from resilient_session.testing.upstream import Drip, FlakyUpstream, Reply, Trickle
from tests.threads import run_together

pytestmark = pytest.mark.integration

# A trickled head (status line and Content-Length) is about 40 bytes: 12 s at 0.3 s a byte.
GAP = 0.3


def _timed_get(session: requests.Session, url: str, **kwargs: Any) -> tuple[Any, float]:
    """(the response, or the exception raised, and the seconds the call took)."""
    started = time.monotonic()
    try:
        result: Any = session.get(url, **kwargs)
    except requests.RequestException as exc:
        result = exc
    return result, time.monotonic() - started


def test_trickled_headers_are_cut_at_the_deadline(upstream, make_session):
    """Headers one byte every 0.3 s under deadline=1: DeadlineExceeded about 1 s in, not the
    12 s the trickle takes; one try, as the deadline is spent."""
    upstream.script("/trickle", Trickle(interval=GAP))

    result, elapsed = _timed_get(make_session(), upstream.url("/trickle"), deadline=1.0)

    assert type(result) is DeadlineExceeded
    assert "ran out during try 1" in str(result)
    assert 0.95 <= elapsed < 1.5
    assert upstream.hits("/trickle") == 1


def test_a_trickle_under_a_long_read_timeout_is_cut_at_the_deadline(upstream, make_session):
    """Gaps of 0.3 s never trip a 5 s read timeout; the 1 s deadline still ends the try."""
    upstream.script("/trickle", Trickle(interval=GAP))

    result, elapsed = _timed_get(
        make_session(), upstream.url("/trickle"), deadline=1.0, timeout=(5.0, 5.0)
    )

    assert isinstance(result, DeadlineExceeded)
    assert 0.95 <= elapsed < 1.5


def test_a_cut_connection_is_not_reused(upstream, make_session):
    """After the watchdog cut a try, the next call opens a new connection and succeeds."""
    upstream.script("/trickle", Trickle(interval=GAP))
    session = make_session()

    result, _ = _timed_get(session, upstream.url("/trickle"), deadline=0.5)
    response = session.get(upstream.url("/ok"), deadline=2.0)

    assert isinstance(result, DeadlineExceeded)
    assert response.status_code == 200
    assert response.content == b"ok"
    assert [hit.connection for hit in upstream.received()] == [1, 2]


def test_a_healthy_call_keeps_its_pooled_connection(upstream, make_session):
    """The watchdog never shuts a socket down once its try disarmed: a call made after the
    first call's deadline has passed reuses the first call's connection."""
    session = make_session()

    first = session.get(upstream.url("/a"), deadline=0.3)
    time.sleep(0.5)  # past the first call's deadline: an armed watch would have fired by now
    second = session.get(upstream.url("/b"), deadline=0.3)
    third = session.get(upstream.url("/c"))

    assert [first.status_code, second.status_code, third.status_code] == [200, 200, 200]
    assert upstream.connections == 1
    assert [hit.connection for hit in upstream.received()] == [1, 1, 1]


def test_a_streamed_body_is_outside_the_deadline(upstream, make_session):
    """With stream=True the watch ends when the headers are in: a body read after the
    deadline has passed still arrives whole."""
    upstream.script("/drip", Drip(total_bytes=8, interval=0.05))

    response = make_session().get(upstream.url("/drip"), deadline=0.2, stream=True)
    body = response.raw.read()  # about 0.4 s of drip, past the 0.2 s deadline

    assert response.status_code == 200
    assert body == b"x" * 8


def test_only_calls_with_a_deadline_arm_the_watchdog(upstream, make_session, monkeypatch):
    """A call without a deadline never reaches the watchdog; one with a deadline arms it
    once per try."""
    armed: list[Watch] = []
    original = WATCHDOG.arm

    def counting(watch: Watch, sock: socket.socket | None) -> None:
        armed.append(watch)
        original(watch, sock)

    monkeypatch.setattr(WATCHDOG, "arm", counting)
    upstream.script("/flaky", Reply(503), Reply(200))
    session = make_session()

    session.get(upstream.url("/free"))
    session.get(upstream.url("/free"))
    assert armed == []
    response = session.get(upstream.url("/flaky"), deadline=5.0)

    assert response.status_code == 200
    assert len(armed) == 2
    assert armed[0] is not armed[1]


def test_a_try_without_a_watch_runs_urllib3s_own_getresponse(upstream, make_session):
    """The watched connection adds no frame to a try without a watch: its getresponse is
    urllib3's own, and the one a watch installs goes once the headers are in."""
    session = make_session()
    url = upstream.url("/ok")

    session.get(url, deadline=5.0)
    pools = session.get_adapter(url).poolmanager.pools
    keys = pools.keys()  # urllib3's container refuses to be iterated itself
    (conn,) = [conn for key in keys for conn in pools[key].pool.queue if conn]
    after_deadline = conn.getresponse.__func__
    session.get(url)
    after_none = conn.getresponse.__func__

    assert isinstance(conn, watched_module.WatchedHTTPConnection)
    assert after_deadline is after_none is HTTPConnection.getresponse
    assert upstream.connections == 1


def test_trickling_and_healthy_calls_in_16_threads(upstream, make_session):
    """Half the threads call a trickling upstream, half a healthy one, on one session: every
    healthy call succeeds, every trickling one ends with DeadlineExceeded near its deadline."""
    upstream.script("/healthy", Reply(200, body=b"fine", delay=0.01))
    # Cut tries count against their host's breaker: a threshold no run reaches keeps every
    # trickling call a real try, and a host of its own keeps the healthy calls' breaker apart.
    session = make_session(retry={"max_attempts": 1}, breaker={"failure_threshold": 1000})
    deadline = 0.5
    results: list[tuple[int, Any, float]] = []
    lock = threading.Lock()

    with FlakyUpstream() as trickler:
        trickler.script("/trickle", Trickle(interval=0.2))
        urls = [upstream.url("/healthy"), trickler.url("/trickle")]

        def body(index: int) -> None:
            for _ in range(3):
                result, elapsed = _timed_get(session, urls[index % 2], deadline=deadline)
                with lock:
                    results.append((index, result, elapsed))

        run_together(16, body, timeout=30.0)
        trickled = trickler.hits("/trickle")

    healthy = [(result, elapsed) for index, result, elapsed in results if index % 2 == 0]
    trickling = [(result, elapsed) for index, result, elapsed in results if index % 2]
    assert len(healthy) == len(trickling) == 24
    assert all(getattr(result, "status_code", None) == 200 for result, _ in healthy)
    assert all(result.content == b"fine" for result, _ in healthy)
    assert all(type(result) is DeadlineExceeded for result, _ in trickling)
    assert trickled == 24
    # Two shared cores and other tests running: the margin is for the scheduler, not for
    # the watchdog, which fires within a few milliseconds of the instant.
    assert max(elapsed for _, elapsed in trickling) < deadline + 0.5


class _SlowTLS:
    """A TCP server on loopback that answers a TLS ClientHello with the header of a 16 KiB
    handshake record and then its bytes one every *interval* seconds (or nothing at all)."""

    def __init__(self, interval: float | None) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.accepted = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._listener.getsockname()[1]}/"

    def __enter__(self) -> _SlowTLS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self._listener.close()

    def _serve(self) -> None:
        conns: list[socket.socket] = []
        deadline = time.monotonic() + 20.0
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    conn, _ = self._listener.accept()
                    conns.append(conn)
                    self.accepted += 1
                    threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()
        finally:
            for conn in conns:
                conn.close()

    def _trickle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.recv(4096)  # the ClientHello
            if self.interval is None:
                self._stop.wait(20.0)
                return
            conn.sendall(b"\x16\x03\x03\x40\x00")  # handshake record, 16384 bytes to come
            for _ in range(16384):
                if self._stop.wait(self.interval):
                    return
                conn.sendall(b"\x00")


def test_a_trickled_tls_handshake_is_cut_at_the_deadline(make_session):
    """Each handshake read gets a byte within 0.3 s, so no read times out; the watchdog ends
    the handshake at the 1 s deadline."""
    with _SlowTLS(GAP) as server:
        result, elapsed = _timed_get(make_session(), server.url, deadline=1.0)

    assert type(result) is DeadlineExceeded
    assert 0.95 <= elapsed < 1.5
    assert server.accepted == 1


def test_a_silent_tls_handshake_is_bounded_by_the_clamped_connect_timeout(
    make_session, monkeypatch
):
    """A handshake that gets no byte at all is bounded already: its reads wait at most the
    connect timeout, clamped to the deadline. Shown with the watchdog switched off."""
    monkeypatch.setattr(watched_module, "_current_watch", lambda: None)
    with _SlowTLS(None) as server:
        result, elapsed = _timed_get(make_session(), server.url, deadline=1.0)

    assert type(result) is DeadlineExceeded
    # Far from the 20 s the server stays silent; the margin is for a loaded scheduler, which
    # once took the clamped read's wake-up past 1.5 s.
    assert 0.95 <= elapsed < 2.0


def test_a_stream_of_healthy_calls_does_not_wake_the_watchdog(upstream, make_session, monkeypatch):
    """Each new watch falls due after the one the thread sleeps until, so arming it never
    wakes the thread: at most one wake-up (an idle thread's first watch) in 100 calls."""
    wakes: list[int] = []
    notify = WATCHDOG._wake.notify

    def counting(n: int = 1) -> None:
        wakes.append(n)
        notify(n)

    monkeypatch.setattr(WATCHDOG._wake, "notify", counting)
    session = make_session()

    statuses = {session.get(upstream.url("/ok"), deadline=10.0).status_code for _ in range(100)}

    assert statuses == {200}
    assert len(wakes) <= 1
    assert upstream.connections == 1


def _wait_until_asleep(dog: Watchdog, until: float) -> None:
    """Bounded: until *dog*'s thread sleeps until the instant *until*."""
    limit = time.monotonic() + 5.0
    while dog._wake_at != until and time.monotonic() < limit:
        time.sleep(0.005)
    assert dog._wake_at == until


def test_an_earlier_watch_wakes_the_sleeping_watchdog():
    """The thread sleeps until the earliest instant it knows; a watch armed later that falls
    due sooner wakes it and is fired at its own instant, not the long one's."""
    dog = Watchdog()
    long_one = Watch(3600.0)
    dog.arm(long_one, None)
    _wait_until_asleep(dog, long_one.until)
    ours, theirs = socket.socketpair()
    ours.settimeout(5.0)
    try:
        started = time.monotonic()
        short = Watch(0.2)
        dog.arm(short, ours)
        assert ours.recv(1) == b""  # shut down by the watchdog, not timed out
        elapsed = time.monotonic() - started
    finally:
        ours.close()
        theirs.close()

    assert 0.19 <= elapsed < 1.0
    assert dog.disarm(short) is True
    assert dog.disarm(long_one) is False
    assert len(dog) == 0


def test_watches_armed_from_8_threads_each_fire_near_their_instant():
    """Short watches of mixed lengths armed from 8 threads at once, so arms land while the
    thread sleeps, wakes and looks: none is missed, each fires soon after its instant."""
    dog = Watchdog()
    late: list[float] = []
    lock = threading.Lock()

    def body(index: int) -> None:
        for round_number in range(8):
            seconds = 0.02 + 0.01 * ((index + round_number) % 7)
            ours, theirs = socket.socketpair()
            ours.settimeout(5.0)
            try:
                watch = Watch(seconds)
                dog.arm(watch, ours)
                assert ours.recv(1) == b""
                ended = time.monotonic()
            finally:
                ours.close()
                theirs.close()
            assert dog.disarm(watch) is True
            assert watch.state == FIRED
            with lock:
                late.append(ended - watch.until)

    run_together(8, body, timeout=30.0)

    assert len(late) == 64
    assert min(late) >= 0
    # Two shared cores and other tests running: the margin is for the scheduler.
    assert max(late) < 0.5
    assert len(dog) == 0
