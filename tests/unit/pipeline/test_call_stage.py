"""The call level: a call stage runs once per call around every try of it, list order is
nesting order, and a resume goes on along the per-try chain past every call stage."""

from __future__ import annotations

import pytest

import resilient_session._pipeline.chains as chains
from resilient_session import ResilientSession
from resilient_session._pipeline.attempt import Call, Decision, Outcome, Reason, Verdict
from resilient_session._pipeline.call_stage import CallStage, Run, Tries, compose_calls
from resilient_session._pipeline.stages import standard_chain
from resilient_session.adapter import ResilientAdapter
from resilient_session.testing import ScriptedTransport

# A 503 that says when to come back: the wait before the next try is exactly one second.
BUSY = (503, {"Retry-After": "1"})


def recorder(name: str, trail: list[str], seen: list[Call] | None = None) -> CallStage:
    def stage(call: Call, run: Run, /) -> Outcome:
        trail.append(f"{name}>")
        if seen is not None:
            seen.append(call)
        outcome = run(call)
        trail.append(f"<{name}")
        return outcome

    return stage


def _adapter(session: ResilientSession) -> ResilientAdapter:
    adapter = session.get_adapter("http://svc.test/")
    assert isinstance(adapter, ResilientAdapter)
    return adapter


def test_a_call_stage_sees_the_call_once_and_run_ends_it_after_its_retries(harness, clock):
    """Two 503s, then a 200: the call stage runs once, around all three tries, and run hands
    it the final 200 after the two waits."""
    h = harness()
    transport = ScriptedTransport(clock, BUSY, BUSY, 200)
    trail: list[str] = []
    seen: list[Call] = []
    calls = compose_calls([recorder("stage", trail, seen)], Tries(standard_chain(transport)))
    call = h.first_attempt().call
    outcome = calls(call)
    assert (outcome.status, [a.number for a in transport.sent]) == (200, [1, 2, 3])
    assert (trail, seen, clock.sleeps) == (["stage>", "<stage"], [call], [1.0, 1.0])


def test_call_stages_nest_in_list_order(harness, clock):
    """compose_calls([a, b]) runs a around b around the tries."""
    trail: list[str] = []
    transport = ScriptedTransport(clock, 200)
    calls = compose_calls([recorder("a", trail), recorder("b", trail)], Tries(transport))
    outcome = calls(harness().first_attempt().call)
    assert (outcome.status, transport.calls) == (200, 1)
    assert trail == ["a>", "b>", "<b", "<a"]


def test_a_resume_goes_on_along_the_per_try_chain_past_every_call_stage(harness, clock):
    """Resumed after try 2 ended in a 0.5 s retry, the call sends try 3 on the per-try chain
    after the wait; no call stage runs again."""
    trail: list[str] = []
    transport = ScriptedTransport(clock, 200)
    calls = compose_calls([recorder("a", trail), recorder("b", trail)], Tries(transport))
    second = harness().first_attempt().replace(number=2)
    retry = Outcome(decision=Decision(Verdict.RETRY, Reason.OVERLOAD, 0.5))
    outcome = calls.resume(second, retry)
    assert (outcome.status, [a.number for a in transport.sent]) == (200, [3])
    assert (trail, clock.sleeps) == ([], [0.5])


def test_a_final_outcome_resumes_to_itself(harness, clock):
    """A resume after a try whose decision is final sends nothing and returns that outcome."""
    transport = ScriptedTransport(clock, 200)
    done = Outcome(decision=Decision(Verdict.GIVE_UP, Reason.NOT_RETRYABLE))
    outcome = Tries(transport).resume(harness().first_attempt(), done)
    assert (outcome, transport.calls, clock.sleeps) == (done, 0, [])


def test_the_adapter_runs_a_call_through_its_call_stages(clock, monkeypatch):
    """A call stage in the adapter's call chain runs once per call, around the call's 503 and
    its retried 200; with no call stage configured the adapter has no call chain."""
    assert _adapter(ResilientSession(clock=clock))._calls is None
    trail: list[str] = []
    seen: list[Call] = []
    monkeypatch.setattr(
        chains, "call_stages", lambda transport, runtime, *_: [recorder("s", trail, seen)]
    )
    session = ResilientSession(clock=clock)
    transport = ScriptedTransport(clock, BUSY, 200)
    transport.attach(session)
    response = session.get("http://svc.test/items")
    assert (response.status_code, transport.calls, trail) == (200, 2, ["s>", "<s"])
    assert ([c.request.url for c in seen], clock.sleeps) == (["http://svc.test/items"], [1.0])


@pytest.mark.parametrize("hedging", [False, True])
def test_the_adapter_has_a_call_chain_only_when_a_host_hedges(clock, hedging):
    """Hedging on for one host builds the call chain; off everywhere, none is built."""
    config = {"hosts": {"svc.test": {"hedging": {"enabled": hedging}}}}
    adapter = _adapter(ResilientSession(config, clock=clock))
    assert (adapter._calls is not None) is hedging
