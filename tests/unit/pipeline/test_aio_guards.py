"""The async guards folded (``aio/guards.py``): the async chain runs budget, decide, breaker,
throttle and limit as one stage, and every call through it ends as it ends through the five
async stages nested, with the same waits and the same per-host state after."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_session._pipeline.aio import aresume, async_chain
from resilient_session._pipeline.aio.drive import AsyncNext, acompose
from resilient_session._pipeline.aio.guards import aguard_tries
from resilient_session._pipeline.aio.stages import async_stages
from resilient_session._pipeline.attempt import Attempt, Outcome, Verdict, first_attempt
from resilient_session._pipeline.call import start_call
from resilient_session._pipeline.happy import answered
from resilient_session._state.limit import Signal
from resilient_session._state.registry import HostRegistry
from resilient_session._transport.httpx_wire import HTTPX_WIRE
from resilient_session.config import load
from resilient_session.deadline import deadline as deadline_scope
from resilient_session.testing import FakeClock

from .test_guards import CONFIG

URL = "http://svc.test/items"
_IGNORE = Signal.IGNORE

_STEPS = st.sampled_from(
    [200, 204, 404, 429, (429, {"Retry-After": "1"}), 500, 503, httpx.ConnectError,
     httpx.ReadTimeout]
)  # fmt: skip
_CALL = st.fixed_dictionaries(
    {
        "steps": st.lists(_STEPS, min_size=1, max_size=4),
        "latency": st.sampled_from([0.0, 0.3]),
        "deadline": st.sampled_from([None, 2.0]),
        "method": st.sampled_from(["GET", "POST"]),
        "stamped": st.booleans(),
        "slot_held": st.booleans(),
        "pause": st.sampled_from([0.0, 0.5, 2.0]),
    }
)


class Stop(BaseException):
    """What a transport raises that no stage may swallow (a KeyboardInterrupt's kind)."""


class Scripted:
    """An async transport answering each try with the next step (the last one repeats)."""

    def __init__(self, clock: FakeClock, steps: list[Any], latency: float, stamped: bool):
        self.clock, self.steps, self.latency, self.stamped = clock, steps, latency, stamped
        self.calls = 0

    async def __call__(self, attempt: Attempt) -> Outcome:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        self.clock.advance(self.latency)
        if isinstance(step, type):
            return Outcome(error=step("scripted", request=attempt.request))
        status, headers = step if isinstance(step, tuple) else (step, {})
        response = httpx.Response(status, headers=headers, content=b"x")
        if self.stamped and status < 400:
            return answered(response)
        return Outcome(response)


def _nested(transport: AsyncNext, registry: HostRegistry) -> AsyncNext:
    return acompose(async_stages(), transport)


def _folded(transport: AsyncNext, registry: HostRegistry) -> AsyncNext:
    return async_chain(transport, registry.runtime)


def _first(registry: HostRegistry, clock: FakeClock, method: str, deadline: float | None):
    request = httpx.Request(method, URL)
    if deadline is None:
        call = start_call(request, registry, HTTPX_WIRE, url=URL, body=request.content)
    else:
        with deadline_scope(deadline, clock=clock):
            call = start_call(request, registry, HTTPX_WIRE, url=URL, body=request.content)
    return first_attempt(call)


async def _drive(chain: AsyncNext, first: Attempt) -> Outcome:
    outcome = await chain(first)
    if outcome.decision.verdict is Verdict.RETRY:
        outcome = await aresume(chain, first, outcome)
    return outcome


def _summary(outcome: Outcome) -> tuple[Any, ...]:
    error = outcome.error
    return (
        outcome.status,
        type(error).__name__ if error is not None else None,
        outcome.decision,
        outcome.refused,
        outcome.breaker,
        None if outcome.fallback is None else outcome.fallback.status,
    )


class Side:
    """One registry on its own clock and random source, calls run through *chain_of*."""

    def __init__(self, chain_of: Any) -> None:
        self.clock = FakeClock()
        self.registry = HostRegistry(load(CONFIG), clock=self.clock, rng=random.Random(7))
        self.chain_of = chain_of

    def call(self, spec: dict[str, Any]) -> tuple[Any, ...]:
        self.clock.advance(spec["pause"])
        transport = Scripted(self.clock, spec["steps"], spec["latency"], spec["stamped"])
        first = _first(self.registry, self.clock, spec["method"], spec["deadline"])
        limit = self.registry.for_url(URL).limit
        assert limit is not None
        held = spec["slot_held"] and limit.acquire(None)
        try:
            outcome = asyncio.run(_drive(self.chain_of(transport, self.registry), first))
        finally:
            if held:
                limit.release(_IGNORE)
        return _summary(outcome), transport.calls

    def state(self) -> dict[str, Any]:
        return {key: health.as_dict() for key, health in self.registry.health().items()}


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(_CALL, min_size=1, max_size=10))
def test_a_folded_async_chain_ends_every_call_as_the_nested_stages_do(calls):
    """Any run of calls (answers, errors, retries, a breaker opening and half-opening, the
    budget spent, the throttle refusing, the limit full) ends each call with the same outcome
    and waits through the folded async guards as through the five async stages nested, and
    leaves the same per-host state."""
    folded, nested = Side(_folded), Side(_nested)
    for spec in calls:
        assert folded.call(spec) == nested.call(spec)
        assert (folded.clock.sleeps, folded.clock.now) == (nested.clock.sleeps, nested.clock.now)
    assert folded.state() == nested.state()


def test_the_async_chain_folds_the_guards_into_one_stage():
    """Between the events and the deadline stage the async chain holds one stage,
    aguard_tries, linked to the stages inside and to the five nested for any other try."""
    registry = HostRegistry(load({}), clock=FakeClock())

    async def transport(attempt: Attempt) -> Outcome:
        return Outcome()

    chain: Any = async_chain(transport, registry.runtime)
    folded = chain.__defaults__[0]  # the events stage, linked: its call_next is the fold
    assert folded.__code__ is aguard_tries.__code__
    inner, guarded = folded.__defaults__
    assert [inner.__name__, guarded.__name__] == ["enforce_deadline", "spend_budget"]


@pytest.mark.parametrize("chain_of", [_folded, _nested], ids=["folded", "nested"])
def test_a_try_that_raises_gives_back_its_slot_and_counts_nothing(chain_of):
    """A BaseException (a cancellation's kind) from the transport passes through, the slot is
    given back and the breaker counts the try as saying nothing of the host, folded or not."""
    clock = FakeClock()
    registry = HostRegistry(load(CONFIG), clock=clock)

    async def raising(attempt: Attempt) -> Outcome:
        raise Stop

    with pytest.raises(Stop):
        asyncio.run(_drive(chain_of(raising, registry), _first(registry, clock, "GET", None)))
    health = registry.health()["http://svc.test:80"]
    assert (health.in_flight, health.tries, health.failures, health.calls) == (0, 0, 0, 1)


def test_a_try_the_guards_do_not_all_admit_at_once_goes_through_the_five():
    """A slot held by another try sends this one through the nested stages: the limit stage
    waits for one (max_wait) and refuses it, as without the fold."""
    clock = FakeClock()
    registry = HostRegistry(load(CONFIG), clock=clock)
    limit = registry.for_url(URL).limit
    assert limit is not None
    assert limit.acquire(None)
    transport = Scripted(clock, [200], 0.0, True)
    try:
        outcome = asyncio.run(
            _drive(_folded(transport, registry), _first(registry, clock, "GET", None))
        )
    finally:
        limit.release(_IGNORE)
    assert (outcome.refused, outcome.status, transport.calls) == ("concurrency_limit", None, 0)


def test_the_fleets_word_is_awaited_before_each_try():
    """A breaker with an aheed (a fleet's) has it awaited once per try through the fold too."""
    clock = FakeClock()
    registry = HostRegistry(load({}), clock=clock)
    heard: list[int] = []

    async def aheed() -> None:
        heard.append(1)

    registry.for_url(URL).breaker.aheed = aheed
    transport = Scripted(clock, [503, 200], 0.0, True)
    outcome = asyncio.run(
        _drive(_folded(transport, registry), _first(registry, clock, "GET", None))
    )
    assert (outcome.status, heard, transport.calls) == (200, [1, 1], 2)
