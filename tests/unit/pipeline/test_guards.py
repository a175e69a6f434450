"""The guards folded (``stages/guards.py``): the standard chain runs budget, decide, breaker,
throttle and limit as one stage, and every call through it ends as it ends through the five
stages nested, with the same waits and the same per-host state after."""

from __future__ import annotations

import random
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.drive import Next, compose, drive
from resilient_session._pipeline.happy import answered
from resilient_session._pipeline.hedging.racing_stages import racing_chain
from resilient_session._pipeline.slots import Slots
from resilient_session._pipeline.stages import standard_chain, standard_slots, standard_stages
from resilient_session._pipeline.stages.guards import FOLDED, compose_folded, guard_tries
from resilient_session._pipeline.stages.limit import limit_concurrency
from resilient_session._state.limit import Signal
from resilient_session.testing import FakeClock, ScriptedTransport
from tests.conftest import Harness

# Small enough that a few calls open the breaker, spend the budget, wake the throttle and
# fill the limit; waits short enough that the breaker half-opens within a script.
CONFIG: dict[str, Any] = {
    "defaults": {
        "retry": {"max_attempts": 3, "backoff_base": 0.1, "backoff_cap": 0.4},
        "breaker": {"failure_threshold": 3, "recovery_timeout": 1.0},
        "budget": {"max_tokens": 2.0, "ratio": 0.5, "min_per_second": 0.5},
        "throttle": {"min_tries": 4, "k": 1.5},
        "limit": {"initial": 1, "initial_burst": 1, "min": 1, "max": 2, "max_wait": 0.0},
    }
}

_STEPS = st.sampled_from(
    [200, 204, 404, 429, (429, {"Retry-After": "1"}), 500, 503, requests.ConnectionError,
     requests.ReadTimeout]
)  # fmt: skip
_CALL = st.fixed_dictionaries(
    {
        "steps": st.lists(_STEPS, min_size=1, max_size=4),
        "latency": st.sampled_from([0.0, 0.3]),
        "deadline": st.sampled_from([None, 2.0]),
        "method": st.sampled_from(["GET", "POST"]),
        # What stands in for the network: a scripted transport's plain outcome, or the one
        # the adapter stamps on a happy answer (answered()).
        "stamped": st.booleans(),
        # A slot of the limit held by another caller throughout the call.
        "slot_held": st.booleans(),
        "pause": st.sampled_from([0.0, 0.5, 2.0]),
    }
)


_IGNORE = Signal.IGNORE


class Stop(BaseException):
    """What a transport raises that no stage may swallow (a KeyboardInterrupt's kind)."""


def _stamping(transport: ScriptedTransport) -> Next:
    def send(attempt: Attempt) -> Outcome:
        outcome = transport(attempt)
        response = outcome.response
        if response is not None and response.status_code < 400 and outcome.error is None:
            return answered(response)
        return outcome

    return send


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
        self.harness = Harness(self.clock, random.Random(7), CONFIG)
        self.chain_of = chain_of
        self.heeded = 0

    def call(self, spec: dict[str, Any]) -> tuple[Any, ...]:
        self.clock.advance(spec["pause"])
        transport = ScriptedTransport(self.clock, *spec["steps"], latency=spec["latency"])
        send = _stamping(transport) if spec["stamped"] else transport
        attempt = self.harness.first_attempt(method=spec["method"], deadline=spec["deadline"])
        limit = self.harness.host().limit
        assert limit is not None
        held = spec["slot_held"] and limit.acquire(None)
        try:
            outcome = drive(self.chain_of(send), attempt)
        finally:
            if held:
                limit.release(_IGNORE)
        return _summary(outcome), transport.calls

    def state(self) -> dict[str, Any]:
        return {key: health.as_dict() for key, health in self.harness.registry.health().items()}


def _nested(transport: Next) -> Next:
    return compose(standard_stages(), transport)


@settings(max_examples=80, deadline=None)
@given(calls=st.lists(_CALL, min_size=1, max_size=10))
def test_a_folded_chain_ends_every_call_as_the_nested_stages_do(calls):
    """Any run of calls (answers, errors, retries, a breaker opening and half-opening, the
    budget spent, the throttle refusing, the limit full) ends each call with the same outcome
    and waits through the folded guards as through the five stages nested, and leaves the
    same per-host state."""
    folded, nested = Side(standard_chain), Side(_nested)
    for spec in calls:
        assert folded.call(spec) == nested.call(spec)
        assert (folded.clock.sleeps, folded.clock.now) == (nested.clock.sleeps, nested.clock.now)
    assert folded.state() == nested.state()


def test_the_standard_chain_folds_the_guards_into_one_stage():
    """Between the events and the deadline stage the standard chain holds one stage,
    guard_tries, linked to the stages inside and to the five nested for any other try."""
    chain = standard_chain(lambda attempt: Outcome())
    defaults: Any = chain.__defaults__  # events, linked: its call_next is the fold
    folded = defaults[0]
    assert folded.__code__ is guard_tries.__code__
    assert [name for name, _ in FOLDED] == standard_slots().names()[1:6]


def test_a_try_the_guards_do_not_all_admit_at_once_goes_through_the_five(harness, clock):
    """A slot held by another try sends this one through the nested stages: the limit stage
    waits for one (max_wait) and refuses it, as without the fold."""
    h = harness(CONFIG)
    limit = h.host().limit
    assert limit is not None
    assert limit.acquire(None)
    outcome = drive(standard_chain(ScriptedTransport(clock, 200)), h.first_attempt())
    limit.release(_IGNORE)
    assert (outcome.refused, outcome.status) == ("concurrency_limit", None)


def test_the_fleets_word_is_heeded_before_each_try(harness, clock):
    """A breaker with a heed (a fleet's) has it called once per try through the fold too."""
    h = harness()
    heard: list[int] = []
    h.host().breaker.heed = lambda: heard.append(1)
    outcome = drive(standard_chain(ScriptedTransport(clock, 503, 200)), h.first_attempt())
    assert (outcome.status, heard) == (200, [1, 1])


@pytest.mark.parametrize("chain_of", [standard_chain, _nested], ids=["folded", "nested"])
def test_a_try_that_raises_gives_back_its_slot_and_counts_nothing(harness, clock, chain_of):
    """A BaseException from the transport passes through, the slot is given back and the
    breaker counts the try as saying nothing of the host (no failure), folded or not."""
    h = harness(CONFIG)

    def raising(attempt: Attempt) -> Outcome:
        raise Stop

    with pytest.raises(Stop):
        drive(chain_of(raising), h.first_attempt())
    health = h.registry.health()["http://svc.test:80"]
    assert (health.in_flight, health.tries, health.failures, health.calls) == (0, 1, 0, 1)


def test_slots_that_differ_from_the_standard_run_are_not_folded():
    """A stage replaced in a folded slot, or one inserted among them, keeps every stage as
    composed: the fold stands only for the five standard stages in their order."""

    def other(attempt: Attempt, call_next: Next, /) -> Outcome:
        return call_next(attempt)

    def transport(attempt: Attempt) -> Outcome:
        return Outcome()

    slots = standard_slots()
    for changed in (
        slots.replaced("limit", other),
        slots.inserted_after("breaker", "extra", other),
        Slots([("events", slots["events"]), ("limit", limit_concurrency)]),
    ):
        chain = compose_folded(changed, transport)
        codes = []
        link: Any = chain
        while getattr(link, "__defaults__", None):
            codes.append(link.__code__)
            link = link.__defaults__[0]
        assert guard_tries.__code__ not in codes


@pytest.mark.parametrize("hedge", [False, True], ids=["first", "hedge"])
def test_the_racing_chains_fold_the_guards_too(hedge):
    """A hedged call's tries go through the same fold as any other: between the racing events
    stage and the deadline stage each racing chain holds guard_tries, not the five nested."""
    chain = racing_chain(lambda attempt: Outcome(), hedge=hedge, hooks=False, senders=False)
    defaults: Any = chain.__defaults__  # the racing events stage, linked: its call_next
    assert defaults[0].__code__ is guard_tries.__code__
