"""The httpx wire, method by method: errors classified from httpx's family, refusals in it,
headers on a copy, timeouts read and clamped from the request's extension, the bound, the
release of a retried answer and the cookies it set."""

from __future__ import annotations

import pickle
import random
import ssl

import httpx
import pytest

from resilient_session._pipeline.reason import Reason
from resilient_session._pipeline.wire import Wire
from resilient_session._state.runtime import runtime_for
from resilient_session._state.try_table import ErrorKind
from resilient_session._transport.httpx_wire import (
    DRAIN_LIMIT,
    HTTPX_WIRE,
    CheckedBound,
    extension_timeout,
    with_timeout,
)
from resilient_session.config import load
from resilient_session.httpx import (
    CircuitOpenError,
    ConcurrencyLimitError,
    DeadlineExceeded,
    HedgeCancelled,
    ResponseTooLarge,
    ThrottledError,
)
from resilient_session.testing import FakeClock

pytestmark = pytest.mark.httpx

WIRE: Wire[httpx.Request, httpx.Response] = HTTPX_WIRE
URL = "http://svc.test/items"


def _request(**headers: str) -> httpx.Request:
    return httpx.Request("GET", URL, headers=headers, extensions={"timeout": {"connect": 2.0,
        "read": 3.0, "write": 3.0, "pool": 2.0}})  # fmt: skip


def _tls_connect_error() -> httpx.ConnectError:
    try:
        try:
            raise ssl.SSLCertVerificationError("certificate verify failed")
        except ssl.SSLError as inner:
            raise httpx.ConnectError("tls") from inner
    except httpx.ConnectError as outer:
        return outer


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (httpx.ConnectError("refused"), ErrorKind.CONNECT),
        (httpx.ConnectTimeout("slow connect"), ErrorKind.CONNECT),
        (httpx.PoolTimeout("no connection free"), ErrorKind.CONNECT),
        (httpx.ReadTimeout("slow read"), ErrorKind.TRANSIENT),
        (httpx.WriteTimeout("slow write"), ErrorKind.TRANSIENT),
        (httpx.ReadError("reset"), ErrorKind.TRANSIENT),
        (httpx.RemoteProtocolError("peer closed"), ErrorKind.TRANSIENT),
        (httpx.DecodingError("bad gzip"), ErrorKind.TRANSIENT),
        (httpx.ProxyError("proxy said 502"), ErrorKind.TRANSIENT),
        (httpx.ProxyError("proxy said 407 Proxy Authentication Required"), ErrorKind.OURS),
        (httpx.UnsupportedProtocol("ftp"), ErrorKind.OURS),
        (httpx.LocalProtocolError("bad header"), ErrorKind.OURS),
        (_tls_connect_error(), ErrorKind.OURS),
        (DeadlineExceeded("cut"), ErrorKind.DEADLINE_CUT),
        (CircuitOpenError("open"), ErrorKind.OURS),
        (ValueError("a bug of the caller's"), ErrorKind.OURS),
    ],
)
def test_error_kind_reads_httpx_exceptions(error: BaseException, kind: ErrorKind):
    assert WIRE.error_kind(error) is kind


@pytest.mark.parametrize(
    ("reason", "kind", "base"),
    [
        (Reason.BREAKER_OPEN, CircuitOpenError, httpx.TransportError),
        (Reason.THROTTLED, ThrottledError, CircuitOpenError),
        (Reason.CONCURRENCY_LIMIT, ConcurrencyLimitError, CircuitOpenError),
        (Reason.DEADLINE_SPENT, DeadlineExceeded, httpx.TimeoutException),
        (Reason.DEADLINE, DeadlineExceeded, httpx.TimeoutException),
        (Reason.HEDGE_LOST, HedgeCancelled, httpx.TransportError),
    ],
)
def test_refusal_is_of_httpx_family(reason: Reason, kind: type, base: type):
    request = _request()
    original = httpx.ReadTimeout("slow")
    error = WIRE.refusal(reason, "api.test refused", request, original)
    assert type(error) is kind
    assert isinstance(error, base)
    assert isinstance(error, httpx.HTTPError)
    assert str(error) == "api.test refused"
    assert error.request is request
    assert error.original is original  # type: ignore[attr-defined]
    assert error.__suppress_context__ is True


def test_refusal_for_an_answer_reason_is_a_bug():
    with pytest.raises(ValueError, match="'ok'"):
        WIRE.refusal(Reason.OK, "no", _request())


def test_an_error_pickles_without_its_original_or_request():
    error = DeadlineExceeded("cut", request=_request(), original=httpx.ReadTimeout("slow"))
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (type(copy), str(copy), copy.original) == (DeadlineExceeded, "cut", None)


def test_response_too_large_keeps_its_limit_and_response():
    response = httpx.Response(200)
    error = ResponseTooLarge("too big", limit=10, response=response)
    assert (error.limit, error.response, isinstance(error, httpx.TransportError)) == (
        10,
        response,
        True,
    )


def test_with_headers_sends_a_copy_and_leaves_the_callers_request():
    request = _request(**{"x-request-attempt": "mine", "Accept": "text/plain"})
    sent = WIRE.with_headers(request, [("X-Request-Attempt", "2; max=4"), ("X-Extra", "1")], True)
    assert sent is not request
    assert sent.headers["x-request-attempt"] == "2; max=4"
    assert sent.headers["accept"] == "text/plain"
    assert sent.headers["x-extra"] == "1"
    assert request.headers["x-request-attempt"] == "mine"
    assert "x-extra" not in request.headers
    assert (sent.method, sent.url, sent.stream) == ("GET", request.url, request.stream)
    sent.extensions["timeout"] = {}
    assert request.extensions["timeout"]["read"] == 3.0


def test_with_header_sends_a_copy_with_the_one_header():
    """with_header is with_headers for one pair: always a copy on httpx, first try or not."""
    request = _request(**{"x-request-attempt": "mine"})
    sent = WIRE.with_header(request, "X-Request-Attempt", "1; max=4", True)
    assert sent is not request
    assert (sent.headers["x-request-attempt"], request.headers["x-request-attempt"]) == (
        "1; max=4",
        "mine",
    )


@pytest.mark.parametrize(
    ("timeout", "parts"),
    [
        ({"connect": 2.0, "read": 3.0, "write": 4.0, "pool": 1.0}, (2.0, 3.0)),
        ({"connect": None, "read": None, "write": None, "pool": None}, (None, None)),
        (httpx.Timeout(5.0, connect=1.5), (1.5, 5.0)),
        ((0.5, 7.0), (0.5, 7.0)),
        (4, (4.0, 4.0)),
        (None, (None, None)),
    ],
)
def test_timeouts_read_connect_and_read(timeout: object, parts: tuple[float | None, ...]):
    assert WIRE.timeouts(timeout) == parts


def test_clamped_cuts_every_part_to_what_is_left():
    timeout = {"connect": 2.0, "read": 10.0, "write": None, "pool": 0.5}
    clamped, connect_cut, read_cut = WIRE.clamped(timeout, 3.0)
    assert clamped == {"connect": 2.0, "read": 3.0, "write": 3.0, "pool": 0.5}
    assert (connect_cut, read_cut) == (False, True)
    assert timeout["read"] == 10.0  # the request's own dict is left as it was
    assert WIRE.clamped((5.0, 1.0), 2.0) == (
        {"connect": 2.0, "read": 1.0, "write": 1.0, "pool": 2.0},
        True,
        False,
    )


def test_extension_timeout_and_with_timeout():
    pair = extension_timeout((1.0, 2.0))
    assert pair == {"connect": 1.0, "read": 2.0, "write": 2.0, "pool": 1.0}
    request = _request()
    same = request.extensions["timeout"]
    assert with_timeout(request, same) is request
    sent = with_timeout(request, pair)
    assert sent.extensions["timeout"] is pair
    assert request.extensions["timeout"] is same


def test_bounded_fires_only_past_its_time():
    with WIRE.bounded(60.0, True) as bound:
        pass
    assert bound.fired is False
    with WIRE.bounded(0.0, True) as spent:
        pass
    assert spent.fired is True


def test_raced_sits_in_the_bound_around_it_and_cut_fires_it():
    with WIRE.bounded(60.0, True) as outer:
        raced = WIRE.raced()
        with raced:
            raced.cut()
        assert raced.fired is True
        assert raced.hedge_wait(0.25) == 0.0
        raced.pass_on()
    assert isinstance(outer, CheckedBound)
    assert outer.fired is False  # the outer bound settles by its own time on the way out
    alone = WIRE.raced()
    with alone:
        pass
    assert alone.fired is False


def test_deadline_error_for_a_clamped_timeout_keeps_the_original():
    error = httpx.ReadTimeout("timed out reading http://svc.test/items?token=s3cret")
    cut = WIRE.deadline_error(
        False, error, None, (False, True), "deadline ran out", _request(), frozenset({"token"})
    )
    assert isinstance(cut, DeadlineExceeded)
    assert cut.original is error
    assert "s3cret" not in str(cut)
    assert str(cut).startswith("deadline ran out: timed out reading")


def test_deadline_error_leaves_the_tries_own_timeout_and_answers():
    request = _request()
    names: frozenset[str] = frozenset()
    own = httpx.ReadTimeout("own")
    assert WIRE.deadline_error(False, own, None, (True, False), "m", request, names) is None
    connect = httpx.ConnectTimeout("connect")
    assert isinstance(
        WIRE.deadline_error(False, connect, None, (True, False), "m", request, names),
        DeadlineExceeded,
    )
    late = httpx.Response(200)
    assert WIRE.deadline_error(True, None, late, (True, True), "m", request, names) is None
    reset = httpx.ReadError("reset")
    assert WIRE.deadline_error(False, reset, None, (True, True), "m", request, names) is None
    assert isinstance(
        WIRE.deadline_error(True, reset, None, (True, True), "m", request, names),
        DeadlineExceeded,
    )


def test_cut_connecting():
    assert WIRE.cut_connecting(httpx.ConnectTimeout("c")) is True
    assert WIRE.cut_connecting(httpx.PoolTimeout("p")) is True
    assert WIRE.cut_connecting(DeadlineExceeded("d", original=httpx.ConnectTimeout("c")))
    assert WIRE.cut_connecting(DeadlineExceeded("d", original=httpx.ReadTimeout("r"))) is False


class _Body(httpx.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.read = 0
        self.closed = False

    def __iter__(self):
        for chunk in self.chunks:
            self.read += len(chunk)
            yield chunk

    def close(self) -> None:
        self.closed = True


def test_release_reads_a_short_body_then_closes(clock: FakeClock):
    body = _Body([b"bu", b"sy"])
    response = httpx.Response(503, headers={"Content-Length": "4"}, stream=body)
    runtime = runtime_for(load({}), clock, random.Random(0))
    assert WIRE.release(response, clock.monotonic() + 5.0, runtime) is None
    assert (body.read, body.closed, response.content) == (4, True, b"busy")


def test_release_closes_a_long_or_unsized_body_unread(clock: FakeClock):
    runtime = runtime_for(load({}), clock, random.Random(0))
    for headers in ({"Content-Length": str(DRAIN_LIMIT + 1)}, {}):
        body = _Body([b"x" * 10])
        response = httpx.Response(503, headers=headers, stream=body)
        assert WIRE.release(response, None, runtime) is None
        assert (body.read, body.closed) == (0, True)


def test_release_past_the_deadline_says_so(clock: FakeClock):
    runtime = runtime_for(load({}), clock, random.Random(0))
    response = httpx.Response(503, headers={"Content-Length": "2"}, stream=_Body([b"ok"]))
    cut = WIRE.release(response, clock.monotonic(), runtime)
    assert isinstance(cut, DeadlineExceeded)


def test_carried_cookies_rides_set_cookies_on_the_next_try():
    request = httpx.Request("GET", URL, headers={"Cookie": "mine=1; theirs=old"})
    answer = httpx.Response(
        503, headers=[("Set-Cookie", "theirs=new; Path=/"), ("Set-Cookie", "other=2")]
    )
    answer.request = request
    carried = WIRE.carried_cookies(request, answer, None)
    assert carried is not None
    retry, cookies = carried
    assert retry.headers["Cookie"] == "mine=1; theirs=new; other=2"
    assert request.headers["Cookie"] == "mine=1; theirs=old"
    assert dict(cookies) == {"theirs": "new", "other": "2"}
    plain = httpx.Response(503)
    plain.request = request
    assert WIRE.carried_cookies(request, plain, cookies) is None
