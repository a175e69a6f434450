"""The frozen values built positionally on the hot path hold each field under its own name:
a reordered field would otherwise pass one value off as another, silently."""

from __future__ import annotations

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
    assert outcome.response is not None
    assert outcome._asdict() == {
        "response": outcome.response,
        "error": None,
        "decision": ANSWERED,
        "refused": None,
        "breaker": BreakerState.CLOSED,
        "fallback": None,
    }
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
