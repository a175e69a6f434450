"""The frozen values built positionally on the hot path hold each field under its own name:
a reordered field would otherwise pass one value off as another, silently."""

from __future__ import annotations

import requests
import responses

from resilient_session._pipeline.attempt import (
    ANSWERED,
    UNDECIDED,
    Attempt,
    Call,
    Decision,
    Outcome,
    Reason,
    Verdict,
)
from resilient_session._state.breaker import BreakerState
from resilient_session._state.registry import HostRegistry
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.adapter import ResilientAdapter, start_call
from resilient_session.config import Config
from resilient_session.deadline import deadline


def test_a_call_holds_every_value_under_its_name(clock):
    """start_call, which builds a Call field by field, puts each value in its named field and
    leaves none unset."""
    registry = HostRegistry(Config(), clock=clock)
    request = requests.Request("PUT", "http://svc.test:8080/x", data=b"abc").prepare()
    started = clock.monotonic()
    with deadline(3.0, clock=clock):
        call = start_call(
            request,
            registry,
            stream=True,
            timeout=(1.0, 2.0),
            verify="/ca.pem",
            cert="client.pem",
            proxies={"http": "http://proxy.test:3128"},
        )
    assert {name: getattr(call, name) for name in Call.__slots__} == {
        "request": request,
        "method": "PUT",
        "state": registry.for_url("http://svc.test:8080/"),
        "runtime": registry.runtime,
        "wire": REQUESTS_WIRE,
        "stream": True,
        "timeout": (1.0, 2.0),
        "verify": "/ca.pem",
        "cert": "client.pem",
        "proxies": {"http": "http://proxy.test:3128"},
        "deadline_at": started + 3.0,
        "started_at": started,
        "idempotent": True,
        "replayable": True,
    }


def test_idempotent_and_replayable_are_told_apart(clock):
    """The last two fields differ by name: a PUT of a generator is idempotent but cannot be
    replayed; a POST of bytes can be replayed but is not idempotent."""
    registry = HostRegistry(Config(), clock=clock)
    put = requests.Request("PUT", "http://svc.test/", data=iter([b"a"])).prepare()
    post = requests.Request("POST", "http://svc.test/", data=b"a").prepare()
    first, second = start_call(put, registry), start_call(post, registry)
    assert (first.idempotent, first.replayable, first.timeout) == (True, False, (5.0, 30.0))
    assert (second.idempotent, second.replayable) == (False, True)


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
    call = start_call(request, adapter.registry, timeout=4.0)
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
    outcome = adapter._transport(Attempt.first(start_call(request, adapter.registry)))
    assert outcome.response is not None
    assert outcome.response.status_code == 503
    assert (outcome.decision, outcome.breaker) == (UNDECIDED, None)
    adapter.close()
