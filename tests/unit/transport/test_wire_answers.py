"""The requests wire's answers: a retried answer released (drained to a bound, closed, or cut
by the deadline) and the cookies it set carried to the next try, as before the wire existed."""

from __future__ import annotations

import random

import requests
from requests.cookies import RequestsCookieJar

from resilient_session import DeadlineExceeded
from resilient_session._state.runtime import runtime_for
from resilient_session._transport.body import DRAIN_LIMIT
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.config import load
from resilient_session.testing import FakeClock
from tests.unit.transport.test_cap import endless, once, respond

URL = "http://svc.test/items"


def test_release_drains_a_short_body_into_content_and_returns_the_connection(clock: FakeClock):
    """A streamed 503 of 4 bytes is read whole before the retry and its connection goes back
    to the pool, so should the call end with it, it still reads."""
    response, _, connection, pool = respond(
        once(b"busy"), headers="Content-Length: 4", status=503, cap=None
    )
    runtime = runtime_for(load({}), clock, random.Random(0))

    cut = REQUESTS_WIRE.release(response, clock.monotonic() + 5.0, runtime)

    assert (cut, response.content, pool.returned, connection.closed) == (
        None,
        b"busy",
        [connection],
        False,
    )
    assert clock.sleeps == []


def test_release_of_a_long_body_keeps_the_limit_and_drops_the_connection(clock: FakeClock):
    """A body past DRAIN_LIMIT keeps its first DRAIN_LIMIT bytes; the rest stays unread, so
    the connection is closed before it goes back to the pool, so it is not reused."""
    response, _, connection, pool = respond(endless(b"e" * 1000), status=503, cap=None)
    runtime = runtime_for(load({}), clock, random.Random(0))

    cut = REQUESTS_WIRE.release(response, None, runtime)

    assert cut is None
    assert response.raw.tell() == DRAIN_LIMIT + 1
    assert (len(response.content), connection.closed) == (DRAIN_LIMIT, True)
    assert pool.returned == [connection]


def test_release_cut_by_the_deadline_returns_the_error_and_closes(clock: FakeClock):
    """A drain the spent deadline cuts returns the DeadlineExceeded the call ends with (it is
    not raised), its message naming the status and the redacted URL, the response closed."""
    response, _, connection, _ = respond(endless(b"e" * 1000), status=503, cap=None)
    runtime = runtime_for(load({}), clock, random.Random(0))

    cut = REQUESTS_WIRE.release(response, clock.monotonic(), runtime)

    assert isinstance(cut, DeadlineExceeded)
    assert str(cut) == (
        "deadline ran out while reading the body of 503 from http://svc.test/items?token=REDACTED"
    )
    assert (response.raw.tell(), connection.closed) == (0, True)


def _answer(**cookies: str) -> requests.Response:
    answer = requests.Response()
    answer.status_code = 503
    for name, value in cookies.items():
        answer.cookies.set(name, value, domain="svc.test", path="/")
    return answer


def test_an_answer_that_set_no_cookie_carries_nothing():
    """No Set-Cookie: None, and the next try sends the request this one sent."""
    request = requests.Request("GET", URL, cookies={"mine": "1"}).prepare()

    assert REQUESTS_WIRE.carried_cookies(request, _answer(), None) is None


def test_cookies_an_answer_set_reach_a_copy_of_the_request_on_top_of_those_carried():
    """A copy of the call's request sends its own cookie, those earlier retried answers set,
    and this answer's (a name set again takes the newer value); the call's request is left
    as it was, and the jar returned holds what the adapter saves in the session's jar."""
    request = requests.Request("GET", URL, cookies={"mine": "1"}).prepare()
    carried = RequestsCookieJar()
    carried.set("lb", "node7", domain="svc.test", path="/")
    carried.set("zone", "a", domain="svc.test", path="/")

    result = REQUESTS_WIRE.carried_cookies(request, _answer(zone="b"), carried)

    assert result is not None
    sent, cookies = result
    assert sent is not request
    assert sent.headers["Cookie"] == "mine=1; lb=node7; zone=b"
    assert request.headers["Cookie"] == "mine=1"
    assert cookies.get_dict() == {"lb": "node7", "zone": "b"}
    assert carried.get_dict() == {"lb": "node7", "zone": "a"}
