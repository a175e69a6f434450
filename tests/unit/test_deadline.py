"""The deadline context manager: nesting, None, and what each call sees."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction

import pytest
import requests

from resilient_session import ResilientSession
from resilient_session._pipeline.call import start_call
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.deadline import (
    CallSpan,
    call_scope,
    checked,
    current_scope,
    deadline,
    enter,
    leave,
    narrowed,
    remaining,
)


def test_nested_keeps_the_earliest(clock):
    """An inner, later deadline does not extend the outer one; an earlier one shortens it."""
    with deadline(2.0, clock=clock):
        with deadline(10.0, clock=clock):
            assert remaining(clock=clock) == 2.0
        with deadline(0.5, clock=clock):
            assert remaining(clock=clock) == 0.5
        assert remaining(clock=clock) == 2.0
    assert remaining(clock=clock) is None


def test_none_switches_off_the_configured_default(clock):
    """deadline(None) adds no deadline but marks the config default as not to be used."""
    with deadline(None, clock=clock):
        scope = current_scope()
        assert scope is not None
        assert (scope.at, scope.use_default) == (None, False)
    with deadline(3.0, clock=clock), deadline(None, clock=clock):
        scope = current_scope()
        assert scope is not None
        assert (scope.at, scope.use_default) == (clock.now + 3.0, False)


BAD_NUMBERS = [0, -1.0, float("nan"), float("inf"), float("-inf"), 1e306, 10**400, 1e9 + 1]
NOT_NUMBERS = ["abc", "2", True, False, b"1", [1.0], 1j, object()]


@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_bad_deadline_rejected(clock, bad):
    """A deadline must be a positive, finite number of seconds no larger than MAX_DEADLINE;
    the ValueError names the value."""
    with pytest.raises(ValueError, match="positive number of seconds") as caught:  # noqa: SIM117
        with deadline(bad, clock=clock):
            pass
    assert str(caught.value) == (
        f"deadline must be a positive number of seconds up to 1e+09, got {bad!r}"
    )
    assert current_scope() is None


@pytest.mark.parametrize("bad", NOT_NUMBERS)
def test_deadline_that_is_not_a_number_rejected(clock, bad):
    """Anything but a number or None (a bool included) raises TypeError naming the value."""
    with pytest.raises(TypeError) as caught:  # noqa: SIM117
        with deadline(bad, clock=clock):
            pass
    assert str(caught.value) == (
        f"deadline must be a number of seconds or None, got {bad!r} ({type(bad).__name__})"
    )


@pytest.mark.parametrize("good", [1e-3, 1, 2.5, 1e9, Fraction(1, 2), Decimal("0.5")])
def test_any_real_number_in_range_is_a_deadline(clock, good):
    """ints, floats and other real numbers up to MAX_DEADLINE are accepted, as floats."""
    assert checked(good) == float(good)
    with deadline(good, clock=clock):
        assert remaining(clock=clock) == pytest.approx(float(good))


def test_session_deadline_validated_before_anything_is_sent(clock):
    """deadline= on a call raises the same errors before any request is built or sent."""
    session = ResilientSession(clock=clock)
    with pytest.raises(ValueError, match=r"got inf$"):
        session.get("http://svc.test/", deadline=float("inf"))
    with pytest.raises(ValueError, match=r"got 1e\+306$"):
        session.get("http://svc.test/", deadline=1e306)
    with pytest.raises(TypeError, match=r"got 'abc' \(str\)$"):
        session.get("http://svc.test/", deadline="abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got True \(bool\)$"):
        session.request("GET", "http://svc.test/", deadline=True)
    assert current_scope() is None


def test_new_thread_does_not_inherit(clock):
    """A new thread starts without the deadline unless the context is copied."""
    seen: dict[str, float | None] = {}
    with deadline(2.0, clock=clock):
        plain = threading.Thread(target=lambda: seen.update(plain=remaining(clock=clock)))
        context = contextvars.copy_context()
        copied = threading.Thread(
            target=lambda: context.run(lambda: seen.update(copied=remaining(clock=clock)))
        )
        plain.start()
        copied.start()
        plain.join(timeout=5)
        copied.join(timeout=5)
    assert seen == {"plain": None, "copied": 2.0}


def test_config_default_deadline_applies(harness, clock):
    """deadline.default bounds a call that gives none and sets the header."""
    _, transport = harness({"defaults": {"deadline": {"default": 1.5}}}).run(200)
    assert transport.sent[0].request.headers["X-Request-Timeout-Ms"] == "1500"


def test_caller_deadline_earlier_than_default_wins(harness, clock):
    """The earliest of the caller's deadline and the config default wins."""
    _, transport = harness({"defaults": {"deadline": {"default": 5}}}).run(200, deadline=0.25)
    assert transport.sent[0].request.headers["X-Request-Timeout-Ms"] == "250"


def test_header_name_configurable_and_can_be_off(harness):
    """deadline.header renames the header; null sends none."""
    _, renamed = harness({"defaults": {"deadline": {"header": "Grpc-Timeout-Ms"}}}).run(
        200, deadline=1.0
    )
    assert renamed.sent[0].request.headers["Grpc-Timeout-Ms"] == "1000"
    _, silent = harness({"defaults": {"deadline": {"header": None}}}).run(200, deadline=1.0)
    assert "X-Request-Timeout-Ms" not in silent.sent[0].request.headers
    assert silent.sent[0].timeout == (1.0, 1.0)


@contextlib.contextmanager
def explicit(seconds: object, clock) -> Iterator[None]:
    """The scope ResilientSession.request puts around a call given deadline=*seconds*."""
    if seconds == UNSET_MARK:
        yield
        return
    token = enter(narrowed(seconds, clock, explicit=True))  # type: ignore[arg-type]
    try:
        yield
    finally:
        leave(token)


UNSET_MARK = "unset"


@pytest.mark.parametrize(
    ("default", "enclosing", "given", "expected"),
    [
        (2.0, UNSET_MARK, UNSET_MARK, 2.0),  # the default applies when the call says nothing
        (2.0, UNSET_MARK, 10.0, 10.0),  # an explicit deadline replaces it, even when later
        (2.0, UNSET_MARK, 1.0, 1.0),
        (2.0, UNSET_MARK, None, None),  # None switches the default off
        (None, UNSET_MARK, 10.0, 10.0),
        (None, UNSET_MARK, UNSET_MARK, None),
        (2.0, 5.0, UNSET_MARK, 2.0),  # an enclosing scope and the default: the earliest
        (2.0, 1.0, UNSET_MARK, 1.0),
        (2.0, 5.0, 10.0, 5.0),  # an enclosing scope caps an explicit deadline
        (2.0, 5.0, 3.0, 3.0),
        (2.0, 5.0, None, 5.0),  # None drops the default, never the enclosing scope
        (2.0, None, UNSET_MARK, None),  # deadline(None) around the call drops the default
        (2.0, None, 10.0, 10.0),
    ],
)
def test_explicit_deadline_replaces_default_and_scope_caps_it(
    harness, clock, default, enclosing, given, expected
):
    """deadline= replaces the host's deadline.default; an enclosing deadline() caps both."""
    registry = harness({"defaults": {"deadline": {"default": default}}}).registry
    request = requests.Request("GET", "http://svc.test/items").prepare()
    outer = (
        contextlib.nullcontext() if enclosing == UNSET_MARK else deadline(enclosing, clock=clock)
    )
    with outer, explicit(given, clock):
        call = start_call(request, registry, REQUESTS_WIRE)
    seconds = None if call.deadline_at is None else call.deadline_at - clock.now
    assert seconds == expected


def test_a_call_span_keeps_the_earliest_default_of_its_hops():
    """Hops to hosts with defaults 5, none, 1 and 3 s, from a call begun at 100: the span ends
    at 105, 105, 101, 101: measured from the start, and never extended by a later hop."""
    span = CallSpan(100.0)
    assert [span.default_ends(d) for d in (5.0, None, 1.0, 3.0)] == [105.0, 105.0, 101.0, 101.0]
    assert CallSpan(100.0).default_ends(None) is None


def test_a_call_scope_keeps_the_enclosing_deadline_and_a_switched_off_default(clock):
    """Alone, a call's scope has no deadline of its own and a span begun now; inside
    ``with deadline(2)`` it keeps that instant; inside ``with deadline(None)`` it is the
    enclosing scope itself (no default)."""
    alone = call_scope(clock)
    assert (alone.at, alone.use_default) == (None, True)
    assert alone.span is not None
    assert alone.span.started_at == clock.now
    with deadline(2.0, clock=clock):
        clock.advance(0.5)
        scope = call_scope(clock)
        assert (scope.at, scope.use_default) == (clock.now + 1.5, True)
        assert scope.span is not None
        assert scope.span.started_at == clock.now
    with deadline(None, clock=clock):
        assert call_scope(clock) is current_scope()
