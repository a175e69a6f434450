"""Shortcuts of docs/architecture.md's "Hot path" table that no other test pins: the linked
stages, the first try sent before the loop, the cached attempt text, the caller's intent read
only for a last try, and HTTPAdapter.send called by name."""

from __future__ import annotations

import pickle
from typing import Any

import requests
from requests.adapters import HTTPAdapter

import resilient_session.adapter as adapter_module
from resilient_session import ResilientSession
from resilient_session._adopted_adapters import Around, MountedAround
from resilient_session._hops import format_attempt
from resilient_session._pipeline import call_stage as call_stage_module
from resilient_session._pipeline import intent
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next, compose, resume
from resilient_session._pipeline.stages import deadline as deadline_stage
from resilient_session._pipeline.stages.deadline import attempt_value


def _canned(statuses: list[int]) -> Any:
    """An ``HTTPAdapter.send`` that answers each try with the next status, body read."""
    left = iter(statuses)

    def send(self: HTTPAdapter, request: requests.PreparedRequest, **_: Any) -> requests.Response:
        response = requests.Response()
        response.status_code = next(left)
        response._content = b""
        response.request = request
        response.url = request.url or ""
        return response

    return send


def test_a_function_stage_is_linked_as_a_copy_whose_default_is_the_next_link():
    """compose() links a function stage without a frame between: a copy of the stage whose
    call_next defaults to the inner link, called with the attempt alone."""
    seen: list[str] = []

    def transport(attempt: Attempt) -> Outcome:
        seen.append("transport")
        return Outcome()

    def stage(attempt: Attempt, call_next: Next, /) -> Outcome:
        seen.append("stage")
        return call_next(attempt)

    link = compose([stage], transport)
    outcome = link(None)  # type: ignore[arg-type]  # neither reads the attempt

    assert (link.__wrapped__, link.__defaults__, link.__qualname__) == (  # type: ignore[attr-defined]
        stage,
        (transport,),
        stage.__qualname__,
    )
    assert (outcome, seen) == (Outcome(), ["stage", "transport"])


def test_a_call_its_first_try_ends_never_enters_the_loop(monkeypatch, clock):
    """With no call stage, send sends the first try itself: a 200 never reaches resume(),
    and a 503 then 200 enters it once, after try 1."""
    entered: list[int] = []

    def counted(handler: Next, attempt: Attempt, outcome: Outcome) -> Outcome:
        entered.append(attempt.number)
        return resume(handler, attempt, outcome)

    monkeypatch.setattr(call_stage_module, "resume", counted)
    monkeypatch.setattr(HTTPAdapter, "send", _canned([200, 503, 200]))
    with ResilientSession(clock=clock) as session:
        first = session.get("http://svc.test/a").status_code
        after_entering = list(entered)
        second = session.get("http://svc.test/a").status_code

    assert (first, after_entering, second, entered, len(clock.sleeps)) == (200, [], 200, [1], 1)


def test_the_attempt_text_is_formatted_once_and_cached(harness, monkeypatch):
    """attempt_value gives format_attempt's text, and the same try number and most again
    come from the cache: format_attempt runs once for the pair, and the same text returns."""
    formatted: list[tuple[int, int]] = []

    def counted(number: int, most: int) -> str:
        formatted.append((number, most))
        return format_attempt(number, most)

    monkeypatch.setattr(deadline_stage, "format_attempt", counted)
    monkeypatch.setattr(deadline_stage, "_TEXTS", {})
    attempt = harness().first_attempt()
    most = attempt.call.policy.retry.max_attempts
    first = attempt_value(attempt)

    assert attempt_value(attempt) is first
    assert (first, formatted) == (f"1; max={most}", [(1, most)])


def test_the_attempt_texts_kept_are_bounded(monkeypatch):
    """Past _NUMBERS_KEPT texts of one most, that most's start afresh, and past _MOSTS_KEPT
    mosts all do: a process keeps a bounded number of texts."""
    monkeypatch.setattr(deadline_stage, "_TEXTS", {})
    numbers, mosts = deadline_stage._NUMBERS_KEPT, deadline_stage._MOSTS_KEPT
    for number in range(numbers + 1):
        deadline_stage._attempt_text(number, 1)
    one_most = dict(deadline_stage._TEXTS)
    for most in range(2, mosts + 2):
        deadline_stage._attempt_text(1, most)

    last = dict(deadline_stage._TEXTS)
    assert (one_most, last) == (
        {1: {numbers: f"{numbers}; max=1"}},
        {mosts + 1: {1: f"1; max={mosts + 1}"}},
    )


def test_the_callers_intent_is_read_for_a_last_try_alone(harness, monkeypatch):
    """While the caller retries, try 1 of 3 says so without reading the contextvar, and the
    last try reads it and says one more may follow."""
    reads: list[int] = []

    def caller_retries() -> bool:
        reads.append(1)
        return True

    monkeypatch.setattr(deadline_stage, "caller_retries", caller_retries)
    first = harness().first_attempt()
    most = first.call.policy.retry.max_attempts
    token = intent.enter(True)
    try:
        values = [attempt_value(first), attempt_value(first.replace(number=most))]
    finally:
        intent.leave(token)

    assert (values, len(reads)) == ([f"1; max={most}", f"{most}; max={most + 1}"], 1)


class _Counting(HTTPAdapter):
    """An adapter class with a send of its own, as a mounted adapter's may have."""

    sends = 0

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        _Counting.sends += 1
        return super().send(request, **kwargs)


def test_a_try_calls_httpadapters_send_by_name_only_when_it_is_next(monkeypatch):
    """A try goes out through HTTPAdapter.send looked up on each try (a patch of it is seen),
    without super(); a class list with another send between (a mounted adapter's class)
    reaches that one through super(), as before."""

    class Between(adapter_module.ResilientAdapter, _Counting):  # type: ignore[misc]  # send's keywords
        pass

    class Plain(adapter_module.ResilientAdapter):
        pass

    monkeypatch.setattr(HTTPAdapter, "send", _canned([200, 200, 200]))
    statuses = []
    for kind in (adapter_module.ResilientAdapter, Plain, Between):
        session = requests.Session()
        session.mount("http://", kind())
        statuses.append(session.get("http://svc.test/a").status_code)
    flags = [
        kind._next_send_is_http
        for kind in (adapter_module.ResilientAdapter, Plain, Between, Around, MountedAround)
    ]
    restored = pickle.loads(pickle.dumps(adapter_module.ResilientAdapter()))  # noqa: S301 - our own bytes

    assert (statuses, _Counting.sends) == ([200, 200, 200], 1)
    assert flags == [True, True, False, False, False]
    assert restored._send_by_name is True
