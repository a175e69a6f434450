"""The requests wire's side of a try's request: headers, timeouts, and the bound in time."""

from __future__ import annotations

import pytest
import requests
from urllib3.util import Timeout

from resilient_session._compat import request_cookies
from resilient_session._pipeline.wire import Wire
from resilient_session._transport.owned import mark_owned, take_owned
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session._transport.watchdog import (
    DISARMED,
    FIRED,
    WATCHDOG,
    WATCHED,
    RaceWatch,
    TryWatch,
)
from resilient_session.errors import DeadlineExceeded

WIRE: Wire[requests.PreparedRequest, requests.Response] = REQUESTS_WIRE


def _request(**headers: str) -> requests.PreparedRequest:
    return requests.Request("GET", "http://svc.test/items", headers=headers).prepare()


def test_with_headers_leaves_the_callers_request_as_it_was():
    """The copy sends the new headers (replacing one of another case) and the caller's cookies
    and body; the caller's own request keeps its headers."""
    request = requests.Request(
        "PUT",
        "http://svc.test/items",
        headers={"x-request-attempt": "mine", "Accept": "text/plain"},
        cookies={"session": "abc"},
        data=b"body",
    ).prepare()
    before = dict(request.headers)
    sent = WIRE.with_headers(
        request, [("X-Request-Attempt", "1; max=4"), ("X-Request-Timeout-Ms", "900")], False
    )
    assert dict(sent.headers) == {
        **{k: v for k, v in before.items() if k != "x-request-attempt"},
        "X-Request-Attempt": "1; max=4",
        "X-Request-Timeout-Ms": "900",
    }
    assert sent.headers["x-request-timeout-ms"] == "900"
    assert dict(request.headers) == before
    assert (sent.method, sent.url, sent.body) == ("PUT", "http://svc.test/items", b"body")
    assert sent.headers["Cookie"] == "session=abc"
    jar = request_cookies(sent)
    assert jar is not None
    assert jar.get("session") == "abc"


def test_with_headers_takes_a_plain_dict_of_headers():
    """A prepared request whose headers were replaced by a plain dict, which requests sends as
    it is, is copied too: the caller's dict unchanged, a name of another case replaced."""
    request = requests.Request("GET", "http://svc.test/items").prepare()
    mine = {"Accept": "text/plain", "x-request-attempt": "mine"}
    request.headers = mine  # type: ignore[assignment]  # requests sends any mapping
    sent = WIRE.with_headers(request, [("X-Request-Attempt", "1; max=4")], True)
    assert dict(sent.headers) == {"Accept": "text/plain", "X-Request-Attempt": "1; max=4"}
    assert sent.headers["x-request-attempt"] == "1; max=4"
    assert mine == {"Accept": "text/plain", "x-request-attempt": "mine"}
    assert request.headers is mine


def test_an_owned_request_takes_its_first_trys_headers_itself_and_only_those():
    """A request marked as the call's own is written into on its first try, once: the mark is
    taken, so the next try (or a first try sent again) goes out as a copy."""
    request = _request(Accept="text/plain")
    mark_owned(request)
    sent = WIRE.with_headers(request, [("X-Request-Attempt", "1; max=3")], True)
    assert sent is request
    assert dict(request.headers) == {"Accept": "text/plain", "X-Request-Attempt": "1; max=3"}
    again = WIRE.with_headers(request, [("X-Request-Attempt", "1; max=3")], True)
    assert again is not request
    assert take_owned(request) is False


def test_an_owned_request_is_copied_for_a_later_try_and_keeps_its_mark():
    """Only a first try writes into the call's request: try 2 gets a copy, the mark stays."""
    request = _request()
    mark_owned(request)
    sent = WIRE.with_headers(request, [("X-Request-Attempt", "2; max=3")], False)
    assert (sent is request, dict(request.headers)) == (False, {})
    assert dict(sent.headers) == {"X-Request-Attempt": "2; max=3"}
    assert take_owned(request) is True


def test_with_header_writes_one_header_as_with_headers_does():
    """with_header, the attempt header of a try without a deadline, writes into an owned
    request on its first try and into a copy otherwise, the name kept as given and matched
    in any case, as with_headers does."""
    owned = _request(Accept="text/plain")
    mark_owned(owned)
    sent = WIRE.with_header(owned, "X-Request-Attempt", "1; max=3", True)
    assert (sent is owned, dict(owned.headers)) == (
        True,
        {"Accept": "text/plain", "X-Request-Attempt": "1; max=3"},
    )
    again = WIRE.with_header(owned, "x-request-ATTEMPT", "2; max=3", True)
    assert (again is owned, dict(owned.headers)["X-Request-Attempt"]) == (False, "1; max=3")
    assert dict(again.headers) == {"Accept": "text/plain", "x-request-ATTEMPT": "2; max=3"}
    assert not hasattr(owned, "_resilient_session_calls_own")


def test_the_owned_mark_is_an_attribute_not_a_key_put_in_the_instance_dict():
    """mark_owned sets an attribute and take_owned deletes it: the request keeps the
    attributes requests gave it, and nothing of the mark, once its first try took it."""
    request = _request()
    before = dict(vars(request))
    mark_owned(request)
    marked = getattr(request, "_resilient_session_calls_own", None)
    assert (marked, take_owned(request), vars(request)) == (True, True, before)


def test_only_headers_requests_made_are_marked_owned():
    """Headers replaced by a plain dict have no store to write into: no mark, so a copy."""
    request = _request()
    request.headers = {"Accept": "text/plain"}  # type: ignore[assignment]  # any mapping
    mark_owned(request)
    assert take_owned(request) is False


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        (None, (None, None)),
        (4, (4.0, 4.0)),
        (2.5, (2.5, 2.5)),
        ((1, 7), (1.0, 7.0)),
        ([1, None], (1.0, None)),
        (Timeout(total=5), (5.0, 5.0)),
        (Timeout(connect=2, read=9, total=5), (2.0, 5.0)),
        (Timeout(connect=2, read=3), (2.0, 3.0)),
    ],
)
def test_timeouts_reads_every_shape_requests_accepts(timeout, expected):
    """A number, a pair, None and a urllib3 Timeout (total= read without starting its timer)
    each give their connect and read seconds."""
    assert WIRE.timeouts(timeout) == expected


@pytest.mark.parametrize(
    ("timeout", "remaining", "expected"),
    [
        ((1, 7), 5.0, ((1.0, 5.0), False, True)),
        ((1, 7), 10.0, ((1, 7), False, False)),
        (None, 2.5, ((2.5, 2.5), True, True)),
        (3, 2.0, ((2.0, 2.0), True, True)),
        ((6, 1), 5.0, ((5.0, 1.0), True, False)),
    ],
)
def test_clamped_cuts_each_part_to_what_is_left_and_says_which(timeout, remaining, expected):
    """A part longer than what is left, or unset, is cut to it and flagged; a shorter is kept."""
    assert WIRE.clamped(timeout, remaining) == expected


def test_a_bound_is_the_contexts_watch_inside_its_with_and_settles_unfired():
    """Inside the with, connections find the bound as the watch to arm; a try that never
    armed it (no connection) comes out not fired, with no watch left in force."""
    assert WATCHED.get() is None
    with WIRE.bounded(30.0, False) as bound:
        watch = WATCHED.get()
        assert isinstance(watch, TryWatch)
        assert watch is bound
        assert watch.body is False
    assert (bound.fired, WATCHED.get()) == (False, None)


def test_a_bound_the_watchdog_fired_says_so_after_the_try():
    """A watch its connection armed and the watchdog then fired comes out fired."""
    with WIRE.bounded(30.0, True) as bound:
        watch = WATCHED.get()
        assert watch is not None
        WATCHDOG.arm(watch, None)
        WATCHDOG.cut(watch)
    assert (bound.fired, len(WATCHDOG)) == (True, 0)


def test_a_bound_armed_and_disarmed_by_its_connection_settles_unfired():
    """The healthy try: armed, then disarmed by its connection; the bound did not fire."""
    with WIRE.bounded(30.0, True) as bound:
        watch = WATCHED.get()
        assert watch is not None
        WATCHDOG.arm(watch, None)
        assert WATCHDOG.disarm(watch) is False
        assert watch.state == DISARMED
    assert bound.fired is False


def test_a_race_bound_ends_at_the_deadline_bounds_instant_and_passes_a_firing_on():
    """Inside a deadline's bound, a race's bound takes its instant and body; a cut fires it,
    and passing it on settles the deadline's bound as fired."""
    with WIRE.bounded(30.0, False) as outer:
        outer_watch = WATCHED.get()
        assert outer_watch is not None
        raced = WIRE.raced()
        assert isinstance(raced, RaceWatch)
        assert (raced.until, raced.body) == (outer_watch.until, False)
        with raced:
            assert WATCHED.get() is raced
            WATCHDOG.arm(raced, None)
            raced.cut()
        assert WATCHED.get() is outer_watch
        assert raced.fired is True
        raced.pass_on()
        assert outer_watch.state == FIRED
    assert outer.fired is True


def test_a_race_bound_without_a_deadline_fires_only_when_cut_and_passes_nothing_on():
    """With no deadline the race's bound has no instant; unfired, passing on does nothing."""
    raced = WIRE.raced()
    assert isinstance(raced, RaceWatch)
    assert (raced.until, raced.outer) == (float("inf"), None)
    with raced:
        pass
    raced.pass_on()
    assert raced.fired is False


def test_a_race_bound_with_no_socket_asks_no_hedge_to_wait():
    """No socket to read the kernel's times from: the hedge goes by the caller's clock."""
    assert WIRE.raced().hedge_wait(0.2) == 0.0


def test_deadline_error_turns_a_clamped_read_timeout_into_deadline_exceeded():
    """A read timeout of a part the deadline clamped is the deadline's: its text redacted
    after the message, the timeout kept as original."""
    request = _request()
    timed_out = requests.ReadTimeout("read timed out: http://svc.test/items?token=s3cret")
    error = WIRE.deadline_error(
        False,
        timed_out,
        None,
        (False, True),
        "deadline for GET svc.test ran out during try 2",
        request,
        frozenset({"token"}),
    )
    assert isinstance(error, DeadlineExceeded)
    assert str(error) == (
        "deadline for GET svc.test ran out during try 2: "
        "read timed out: http://svc.test/items?token=REDACTED"
    )
    assert (error.original, error.request) == (timed_out, request)


@pytest.mark.parametrize(
    ("fired", "error", "cuts", "exceeded"),
    [
        (False, requests.ReadTimeout("own"), (False, False), False),  # its own read timeout
        (False, requests.ConnectTimeout("own"), (False, True), False),  # connect not cut
        (False, requests.ConnectTimeout("cut"), (True, False), True),
        (True, requests.ConnectionError("reset"), (False, False), True),  # the watchdog's cut
        (False, requests.ConnectionError("reset"), (True, True), False),
        (True, DeadlineExceeded("already"), (True, True), False),
        (False, None, (True, True), False),
    ],
)
def test_deadline_error_is_the_deadlines_only_for_what_it_cut(fired, error, cuts, exceeded):
    """A timeout counts as the deadline's only for a part it cut, any error of a fired bound
    does, and a DeadlineExceeded already made or a try that ended well is left alone."""
    made = WIRE.deadline_error(fired, error, None, cuts, "deadline", _request(), frozenset())
    assert isinstance(made, DeadlineExceeded) is exceeded
    assert made is None or getattr(made, "original", None) is error


def test_deadline_error_for_an_answer_whose_body_the_bound_cut_closes_it():
    """A try that returned an answer under a bound that fired had its body cut: the answer is
    closed and the deadline error names its status and redacted URL."""
    answer = requests.Response()
    answer.status_code = 200
    answer.url = "http://svc.test/items?token=s3cret"
    closed: list[bool] = []
    answer.close = lambda: closed.append(True)  # type: ignore[method-assign]
    made = WIRE.deadline_error(
        True, None, answer, (True, True), "unused", _request(), frozenset({"token"})
    )
    assert isinstance(made, DeadlineExceeded)
    assert str(made) == (
        "deadline ran out while reading the body of 200 from http://svc.test/items?token=REDACTED"
    )
    assert closed == [True]


def test_cut_connecting_reads_the_original_of_a_deadline_error():
    """A deadline error over a connect timeout was cut connecting; over a read one, not."""
    connect = DeadlineExceeded("cut", original=requests.ConnectTimeout("connect"))
    read = DeadlineExceeded("cut", original=requests.ReadTimeout("read"))
    body = DeadlineExceeded("cut")
    assert [WIRE.cut_connecting(e) for e in (connect, read, body)] == [True, False, False]
