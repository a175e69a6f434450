"""The values that flow through the pipeline: those built positionally on the hot path hold
each field under its own name (a reordered field would otherwise pass one value off as another,
silently), and the next attempt sends what the call's wire carries from a retried answer."""

from __future__ import annotations

from typing import Any

import requests
import responses

from resilient_session._pipeline.attempt import (
    ANSWERED,
    UNDECIDED,
    Attempt,
    Decision,
    Outcome,
    Reason,
    Verdict,
)
from resilient_session._pipeline.call import start_call
from resilient_session._state.breaker import BreakerState
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.adapter import ResilientAdapter


def test_an_outcome_keeps_its_fields_through_each_positional_rebuild():
    """with_decision and with_breaker, built with tuple.__new__, change only their field."""
    response = requests.Response()
    fallback = Outcome(error=ValueError("earlier"))
    decision = Decision(Verdict.RETRY, Reason.TRANSIENT, 0.25)
    first = Outcome(
        response=response,
        error=None,
        decision=UNDECIDED,
        refused=Reason.THROTTLED,
        breaker=None,
        fallback=fallback,
    )
    decided = first.with_decision(decision).with_breaker(BreakerState.HALF_OPEN)
    assert decided._asdict() == {
        "response": response,
        "error": None,
        "decision": decision,
        "refused": Reason.THROTTLED,
        "breaker": BreakerState.HALF_OPEN,
        "fallback": fallback,
    }


@responses.activate
def test_the_transports_outcome_and_the_first_attempt_hold_each_field_by_name(clock):
    """The adapter's own try, built positionally, and the first attempt, built field by field,
    with none left unset."""
    responses.get("http://svc.test/item", body=b"ok")
    adapter = ResilientAdapter(clock=clock)
    request = requests.Request("GET", "http://svc.test/item").prepare()
    call = start_call(request, adapter.registry, REQUESTS_WIRE, timeout=4.0)
    attempt = Attempt.first(call)
    assert {name: getattr(attempt, name) for name in Attempt.__slots__} == {
        "call": call,
        "number": 1,
        "request": request,
        "timeout": 4.0,
        "last_real": None,
        "cookies": None,
    }
    outcome = adapter._transport(attempt)
    assert isinstance(outcome.response, requests.Response)
    assert outcome._asdict() == {
        "response": outcome.response,
        "error": None,
        "decision": ANSWERED,
        "refused": None,
        "breaker": BreakerState.CLOSED,
        "fallback": None,
    }
    # The very stamp answered() makes, so decide hands it on by identity.
    assert (outcome.decision is ANSWERED, outcome.breaker is BreakerState.CLOSED) == (True, True)
    assert outcome.response.content == b"ok"
    adapter.close()


@responses.activate
def test_the_transports_outcome_of_an_error_status_is_undecided(clock):
    """Only an answer below 400 starts as the happy path's outcome; any other is left for
    the stages to decide and for the breaker to mark."""
    responses.get("http://svc.test/item", status=503)
    adapter = ResilientAdapter(clock=clock)
    request = requests.Request("GET", "http://svc.test/item").prepare()
    outcome = adapter._transport(
        Attempt.first(start_call(request, adapter.registry, REQUESTS_WIRE))
    )
    assert outcome.response is not None
    assert outcome.response.status_code == 503
    assert (outcome.decision, outcome.breaker) == (UNDECIDED, None)
    adapter.close()


class CookieWire:
    """A wire whose answers set the cookies of *carries* (None: none), recording each ask;
    its errors are the requests wire's."""

    error_kind = staticmethod(REQUESTS_WIRE.error_kind)

    def __init__(self, carries: tuple[Any, Any] | None) -> None:
        self.carries = carries
        self.asked: list[tuple[Any, Any, Any]] = []

    def carried_cookies(self, request: Any, answer: Any, carried: Any) -> tuple[Any, Any] | None:
        self.asked.append((request, answer, carried))
        return self.carries


def test_the_next_attempt_sends_what_the_wire_carries_from_the_answer(harness):
    """Attempt.next asks the call's wire about the answer it replaces, with the call's own
    request and the cookies carried so far, and sends the copy and jar the wire returns."""
    first = harness().first_attempt()
    wire = CookieWire(("request with lb=node7", "jar with lb=node7"))
    attempt = Attempt.first(first.call.replace(wire=wire))
    answer = requests.Response()

    second = attempt.next(Outcome(answer))

    assert wire.asked == [(first.call.request, answer, None)]
    assert (second.number, second.request, second.cookies, second.last_real) == (
        2,
        "request with lb=node7",
        "jar with lb=node7",
        Outcome(answer),
    )


def test_the_next_attempt_keeps_its_request_when_the_answer_set_no_cookie(harness):
    """An answer the wire finds no cookie in, or an error with no answer at all, leaves the
    next try sending this one's request and carried cookies."""
    first = harness().first_attempt()
    wire = CookieWire(None)
    attempt = Attempt.first(first.call.replace(wire=wire)).sending(first.request, 4.0)
    attempt.cookies = "jar so far"
    answer = requests.Response()

    after_answer = attempt.next(Outcome(answer))
    after_error = attempt.next(Outcome(error=requests.ReadTimeout("slow")))

    assert wire.asked == [(first.call.request, answer, "jar so far")]
    assert [(a.request, a.cookies, a.timeout) for a in (after_answer, after_error)] == [
        (first.request, "jar so far", first.call.timeout),
        (first.request, "jar so far", first.call.timeout),
    ]
