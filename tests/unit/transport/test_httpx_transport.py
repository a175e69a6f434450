"""ResilientTransport and ResilientClient, sync: the same stages as ResilientSession, every try
on the inner transport (httpx's MockTransport, respx, pytest-httpx), the fake clock's waits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from resilient_session import HostRegistry
from resilient_session._pipeline.attempt import Call
from resilient_session.config import load
from resilient_session.deadline import deadline
from resilient_session.httpx import (
    CircuitOpenError,
    DeadlineExceeded,
    ResilientClient,
    ResilientTransport,
    ResponseTooLarge,
)
from resilient_session.testing import FakeClock

pytestmark = pytest.mark.httpx

URL = "http://svc.test/items"


def scripted(*statuses: int, seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    """A mock transport answering *statuses* in turn, the last repeating; *seen* gets each
    request it was sent."""
    sent = seen if seen is not None else []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        status = statuses[min(len(sent), len(statuses)) - 1]
        return httpx.Response(status, content=f"try {len(sent)}".encode())

    return httpx.MockTransport(handler)


def client(clock: FakeClock, inner: httpx.BaseTransport, **sections: Any) -> ResilientClient:
    return ResilientClient({"defaults": sections}, transport=inner, clock=clock)


def test_a_503_is_retried_with_the_wait_on_the_fake_clock(clock: FakeClock):
    seen: list[httpx.Request] = []
    with client(clock, scripted(503, 503, 200, seen=seen), retry={"max_attempts": 4}) as c:
        started = clock.monotonic()
        response = c.get(URL)
    assert (response.status_code, response.text, len(seen)) == (200, "try 3", 3)
    assert [r.headers["X-Request-Attempt"] for r in seen] == ["1; max=4", "2; max=4", "3; max=4"]
    assert clock.monotonic() - started > 0  # two backoff waits, slept on the fake clock
    assert all(r.extensions["timeout"]["read"] == 5.0 for r in seen)


def test_the_last_answer_is_returned_when_tries_run_out(clock: FakeClock):
    seen: list[httpx.Request] = []
    with client(clock, scripted(503, seen=seen), retry={"max_attempts": 3}) as c:
        response = c.get(URL)
    assert (response.status_code, response.text, len(seen)) == (503, "try 3", 3)


def test_a_post_is_not_retried_without_an_idempotency_key(clock: FakeClock):
    seen: list[httpx.Request] = []
    with client(clock, scripted(503, 503, 200, seen=seen), retry={"max_attempts": 3}) as c:
        assert c.post(URL, content=b"x").status_code == 503
        assert len(seen) == 1
        response = c.post(URL, content=b"x", headers={"Idempotency-Key": "k1"})
    assert (response.status_code, len(seen)) == (200, 3)
    assert seen[-1].content == b"x"


def test_a_generator_body_is_sent_once(clock: FakeClock):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503)

    def body() -> Iterator[bytes]:
        yield b"once"

    with client(clock, httpx.MockTransport(handler), retry={"max_attempts": 3}) as c:
        response = c.put(URL, content=body())
    assert (response.status_code, len(seen)) == (503, 1)


def test_a_connect_error_is_retried_then_raised_as_httpx_raises_it(clock: FakeClock):
    tries = []

    def handler(request: httpx.Request) -> httpx.Response:
        tries.append(request)
        raise httpx.ConnectError("refused", request=request)

    c = client(clock, httpx.MockTransport(handler), retry={"max_attempts": 3})
    with c, pytest.raises(httpx.ConnectError, match="refused"):
        c.get(URL)
    assert len(tries) == 3


def test_retry_after_is_honoured_on_the_clock(clock: FakeClock):
    answers = iter([httpx.Response(429, headers={"Retry-After": "7"}), httpx.Response(200)])
    with client(clock, httpx.MockTransport(lambda r: next(answers))) as c:
        started = clock.monotonic()
        assert c.get(URL).status_code == 200
    assert clock.monotonic() - started == pytest.approx(7.0)


def test_an_open_breaker_refuses_in_httpx_family(clock: FakeClock):
    seen: list[httpx.Request] = []
    sections = {"retry": {"max_attempts": 1}, "breaker": {"failure_threshold": 2}}
    with client(clock, scripted(503, seen=seen), **sections) as c:
        assert [c.get(URL).status_code for _ in range(2)] == [503, 503]
        with pytest.raises(
            CircuitOpenError, match=r"circuit breaker for http://svc\.test:80 is open"
        ) as refused:
            c.get(URL)
    assert len(seen) == 2
    assert isinstance(refused.value, httpx.TransportError)


def test_deadline_clamps_each_tries_timeouts_and_headers_say_whats_left(clock: FakeClock):
    seen: list[httpx.Request] = []
    with client(clock, scripted(200, seen=seen), deadline={"header": "X-Request-Timeout-Ms"}) as c:
        assert c.get(URL, deadline=1.5).status_code == 200
    assert seen[0].extensions["timeout"] == {"connect": 1.5, "read": 1.5, "write": 1.5,
        "pool": 1.5}  # fmt: skip
    assert seen[0].headers["X-Request-Timeout-Ms"] == "1500"


def test_a_spent_deadline_refuses_with_httpx_timeout(clock: FakeClock):
    seen: list[httpx.Request] = []
    with client(clock, scripted(200, seen=seen)) as c, deadline(1.0, clock=clock):
        clock.advance(2.0)
        with pytest.raises(DeadlineExceeded) as spent:
            c.get(URL)
    assert seen == []
    assert isinstance(spent.value, httpx.TimeoutException)


def test_a_read_timeout_the_deadline_clamped_is_a_deadline_error(clock: FakeClock):
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    c = client(clock, httpx.MockTransport(handler))
    with c, pytest.raises(DeadlineExceeded, match="ran out during try 1") as cut:
        c.get(URL, deadline=1.0)
    assert isinstance(cut.value.original, httpx.ReadTimeout)


class _Drip(httpx.SyncByteStream):
    """A body whose every chunk takes a second on the fake clock."""

    def __init__(self, clock: FakeClock, chunks: int) -> None:
        self.clock, self.chunks, self.closed = clock, chunks, False

    def __iter__(self) -> Iterator[bytes]:
        for _ in range(self.chunks):
            self.clock.advance(1.0)
            yield b"x"

    def close(self) -> None:
        self.closed = True


def test_the_client_reads_the_body_inside_the_try_under_the_deadline(clock: FakeClock):
    streams: list[_Drip] = []

    def handler(request: httpx.Request) -> httpx.Response:
        streams.append(_Drip(clock, 10))
        return httpx.Response(200, stream=streams[-1])

    with client(clock, httpx.MockTransport(handler), retry={"max_attempts": 1}) as c:
        started = clock.monotonic()
        with pytest.raises(DeadlineExceeded, match="during the body"):
            c.get(URL, deadline=3.0)
    assert clock.monotonic() - started == 3.0  # cut at the chunk that crossed it
    assert streams[0].closed


def test_a_body_over_the_cap_raises_response_too_large(clock: FakeClock):
    inner = httpx.MockTransport(lambda r: httpx.Response(200, content=b"x" * 100))
    c = client(clock, inner, retry={"max_response_bytes": 10})
    with c, pytest.raises(ResponseTooLarge) as over:
        c.get(URL)
    assert (over.value.limit, over.value.response.status_code) == (10, 200)  # type: ignore[union-attr]


def test_a_bare_transport_returns_at_the_headers(clock: FakeClock):
    """httpx.Client on a ResilientTransport: the body is the client's to read, after the try."""
    registry = HostRegistry(load({}), clock=clock)
    inner = httpx.MockTransport(lambda r: httpx.Response(200, stream=_Drip(clock, 3)))
    transport = ResilientTransport(registry=registry, transport=inner)
    with httpx.Client(transport=transport) as c, c.stream("GET", URL) as response:
        assert clock.monotonic() == 1000.0 or response.status_code == 200
        before = clock.monotonic()
        assert response.read() == b"xxx"
    assert clock.monotonic() - before == 3.0


def test_respx_sees_every_try(clock: FakeClock):
    with respx.mock(assert_all_called=True) as mock:
        route = mock.get(URL).mock(side_effect=[httpx.Response(503), httpx.Response(200)])
        registry = HostRegistry(load({"defaults": {"retry": {"max_attempts": 3}}}), clock=clock)
        with httpx.Client(transport=ResilientTransport(registry=registry)) as c:
            assert c.get(URL).status_code == 200
    assert route.call_count == 2


def test_pytest_httpx_sees_every_try(clock: FakeClock, httpx_mock: Any):
    httpx_mock.add_response(url=URL, status_code=502)
    httpx_mock.add_response(url=URL, status_code=200, text="fine")
    with ResilientClient(clock=clock) as c:
        assert c.get(URL).text == "fine"
    assert len(httpx_mock.get_requests()) == 2


def test_start_reads_the_url_body_and_timeout_extension(clock: FakeClock):
    transport = ResilientTransport({}, clock=clock, transport=scripted(200))
    unset = {"connect": None, "read": None, "write": None, "pool": None}
    request = httpx.Request(
        "post", "http://svc.test/a?b=1", content=b"abc", extensions={"timeout": unset}
    )
    call: Call = transport.start(request)
    assert (call.url, call.method, call.replayable, call.idempotent) == (
        "http://svc.test/a?b=1",
        "POST",
        True,
        False,
    )
    assert call.timeout == call.state.default_timeout  # no part set: the host's default
    assert call.stream is True  # a bare transport leaves the body to its caller


@pytest.mark.skipif(
    httpx.__name__ == "httpx2", reason="the fork's venv aliases httpx as the interpreter starts"
)
def test_importing_the_package_does_not_load_httpx():
    import subprocess
    import sys

    code = "import sys, resilient_session; print('httpx' in sys.modules)"
    out = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
