"""The deadline bounds a chunked body's framing too: a chunk extension, leading zeros in a size
or a trailer section trickled byte by byte ends the call at its deadline, not the trickle's."""

from __future__ import annotations

import gc
import os
import threading
import time
import warnings
from typing import Any

import pytest
import requests
from urllib3 import HTTPConnectionPool

from resilient_session import DeadlineExceeded, ResilientSession
from resilient_session._transport.watchdog import WATCHDOG
from resilient_session.testing.faults import Reply
from resilient_session.testing.upstream import FlakyUpstream
from tests.integration.conftest import SessionFactory
from tests.integration.framer import GAP, TRICKLED, Framer
from tests.threads import run_together

pytestmark = pytest.mark.integration

DEADLINE = 1.0
# Within 150 ms of the deadline on a quiet machine; two shared cores under other tests' load
# get room, still far below the trickle's 10 s.
LATEST = DEADLINE + 0.6


def _timed_get(session: requests.Session, url: str, **kwargs: Any) -> tuple[Any, float]:
    """(the response, or the exception raised, and the seconds the call took)."""
    started = time.monotonic()
    try:
        result: Any = session.get(url, **kwargs)
    except requests.RequestException as exc:
        result = exc
    return result, time.monotonic() - started


def _one_try(make_session: SessionFactory) -> ResilientSession:
    """A session that makes one try a call and never opens its breaker nor caps the calls."""
    return make_session(
        retry={"max_attempts": 1},
        breaker={"failure_threshold": 1000},
        limit={"enabled": False},
        throttle={"enabled": False},
    )


@pytest.mark.parametrize("path", TRICKLED)
def test_trickled_framing_ends_at_the_deadline(make_session, path):
    """Each framing read gets a byte every 0.1 s, so no read times out; the call still ends
    with DeadlineExceeded at its 1 s deadline instead of after the 10 s trickle."""
    with Framer() as server:
        result, elapsed = _timed_get(_one_try(make_session), server.url(path), deadline=DEADLINE)
        served = list(server.requests)

    assert type(result) is DeadlineExceeded
    assert "deadline ran out while reading the body of 200" in str(result)
    assert DEADLINE - 0.05 <= elapsed < LATEST
    assert served == [path]
    assert len(WATCHDOG) == 0


@pytest.mark.parametrize("path", TRICKLED)
def test_trickled_framing_of_a_closing_response_ends_at_the_deadline(make_session, path):
    """With Connection: close the response takes its socket from the connection as the head
    ends; the body is still watched, and the call ends at its deadline."""
    with Framer(close=True) as server:
        result, elapsed = _timed_get(_one_try(make_session), server.url(path), deadline=DEADLINE)

    assert type(result) is DeadlineExceeded
    assert DEADLINE - 0.05 <= elapsed < LATEST
    assert len(WATCHDOG) == 0


def test_64_trickled_bodies_at_once_each_end_at_the_deadline(make_session):
    """64 calls at once, each trickling one of the three forms, on one session: every call
    ends with DeadlineExceeded soon after its 1 s deadline, none after the 10 s trickle."""
    session = _one_try(make_session)
    results: list[tuple[Any, float]] = []
    lock = threading.Lock()

    with Framer() as server:

        def body(index: int) -> None:
            outcome = _timed_get(session, server.url(TRICKLED[index % 3]), deadline=DEADLINE)
            with lock:
                results.append(outcome)

        run_together(64, body, timeout=30.0)
        served = len(server.requests)

    assert len(results) == 64
    assert served == 64
    assert all(type(result) is DeadlineExceeded for result, _ in results)
    assert min(elapsed for _, elapsed in results) >= DEADLINE - 0.05
    # 64 client threads, 64 server threads and the watchdog on two shared cores: the margin is
    # for the scheduler, far below the 10 s a trickle takes.
    assert max(elapsed for _, elapsed in results) < DEADLINE + 1.5
    assert len(WATCHDOG) == 0


def test_a_fast_chunked_body_with_a_trailer_keeps_its_connection(make_session):
    """A chunked body with a trailer that arrives at once is read whole under a deadline, and
    its connection, disarmed before it went back to the pool, serves the next calls."""
    session = _one_try(make_session)
    with Framer() as server:
        first = session.get(server.url("/fast"), deadline=0.3)
        time.sleep(0.5)  # past the first call's deadline: a watch left armed would fire now
        second = session.get(server.url("/fast"), deadline=5.0)
        third = session.get(server.url("/fast"))
        connections = server.connections

    assert [first.content, second.content, third.content] == [b"hello"] * 3
    assert connections == 1
    assert len(WATCHDOG) == 0


def test_a_streamed_trickled_body_stays_the_callers(make_session):
    """With stream=True the watch ends with the head: the caller reads a trailer trickled for
    1 s, past the 0.2 s deadline, and gets the whole body."""
    session = _one_try(make_session)
    with Framer(trickle=10) as server:
        response = session.get(server.url("/trailer"), deadline=0.2, stream=True)
        started = time.monotonic()
        body = response.raw.read()
        elapsed = time.monotonic() - started

    assert body == b"hello"
    assert elapsed >= 10 * GAP - 0.1
    assert len(WATCHDOG) == 0


def test_a_connection_goes_back_to_the_pool_only_once_its_watch_ended(
    make_session, upstream: FlakyUpstream, monkeypatch
):
    """Whatever the body (chunked, sized, none at all, none for a HEAD), the watch has ended
    by the time urllib3 puts the connection back, so it can never fire on another try's."""
    armed_at_put: list[bool] = []
    put_conn = HTTPConnectionPool._put_conn

    def spying(pool: HTTPConnectionPool, conn: Any) -> None:
        armed_at_put.append(getattr(conn, "_watch", None) is not None or len(WATCHDOG) > 0)
        put_conn(pool, conn)

    monkeypatch.setattr(HTTPConnectionPool, "_put_conn", spying)
    upstream.script("/none", Reply(204))
    session = _one_try(make_session)
    with Framer() as server:
        chunked = [session.get(server.url("/fast"), deadline=5.0) for _ in range(3)]
        sized = session.get(upstream.url("/ok"), deadline=5.0)
        empty = session.get(upstream.url("/none"), deadline=5.0)
        head = session.head(upstream.url("/ok"), deadline=5.0)
        connections = server.connections

    assert [response.content for response in chunked] == [b"hello"] * 3
    assert (sized.content, empty.status_code, head.status_code) == (b"ok", 204, 200)
    assert armed_at_put == [False] * 6
    assert connections == 1
    assert upstream.connections == 1


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_closing_responses_leave_no_descriptor_behind(make_session):
    """A watched body whose response ends its connection (Connection: close) closes the
    connection's duplicate of the socket with it: 20 such calls leave no descriptor open, and
    none is left for the garbage collector to close (it would warn)."""
    session = _one_try(make_session)
    with Framer(close=True) as server:
        session.get(server.url("/fast"), deadline=5.0)  # the pool and the watchdog, made once
        server.settle()
        before = _open_descriptors()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            contents = [session.get(server.url("/fast"), deadline=5.0).content for _ in range(20)]
            gc.collect()
        server.settle()
        after = _open_descriptors()
        connections = server.connections

    assert contents == [b"hello"] * 20
    assert connections == 21
    assert [str(warning.message) for warning in caught] == []
    # At most: a daemon thread an earlier test left behind may close a socket meanwhile.
    assert after <= before
    assert len(WATCHDOG) == 0
