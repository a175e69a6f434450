"""The hedged race on a fake clock, without threads: which calls race, what a hedge costs the
budget, who wins, what a loser tells, and how the chain is built."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from types import FunctionType
from typing import Any

import pytest

from resilient_session._pipeline.attempt import Attempt, Call, Decision, Outcome, Reason, Verdict
from resilient_session._pipeline.call_stage import Tries
from resilient_session._pipeline.chains import call_chain, call_stages
from resilient_session._pipeline.drive import compose
from resilient_session._pipeline.hedging.hedged_call import HedgeCalls
from resilient_session._pipeline.hedging.race import RACE, Race
from resilient_session._pipeline.hedging.racing_stages import race_try, racing_slots
from resilient_session._pipeline.hedging.timer import TIMER, real_monotonic
from resilient_session._pipeline.stages import standard_chain
from resilient_session._transport.watchdog import WATCHDOG, RaceWatch, Watch
from resilient_session.errors import HedgeCancelled
from resilient_session.testing import ScriptedTransport
from tests.conftest import Harness

HEDGING = {"enabled": True, "delay": 0.05}


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    """The hedges races hand to the workers, kept instead of run; the timer only records."""
    jobs: list[Callable[[], None]] = []
    monkeypatch.setattr(TIMER.workers, "submit", jobs.append)
    monkeypatch.setattr(TIMER, "schedule", lambda race, at: None)
    monkeypatch.setattr(TIMER, "cancel", lambda race: None)
    return jobs


@pytest.fixture
def cuts(monkeypatch: pytest.MonkeyPatch) -> list[Watch]:
    """The watches races cut, recorded instead of fired."""
    found: list[Watch] = []
    monkeypatch.setattr(WATCHDOG, "cut", found.append)
    return found


def _race(h: Harness, chain: Callable[[Attempt], Outcome] | None = None, **request: Any) -> Race:
    call = h.first_attempt(**request).call
    assert call.state.hedge is not None
    return Race(call, call.state.hedge, chain or _refused, contextvars.copy_context())


def _refused(attempt: Attempt) -> Outcome:
    """A hedge a guard refused: it never reaches the race."""
    return Outcome(error=RuntimeError("refused"), refused=Reason.CONCURRENCY_LIMIT)


def _slow_call(race: Race) -> None:
    """The first try goes out and is still out when its delay has passed."""
    race.call.state.bucket.deposit()  # what the budget stage does for a first try
    assert race.sending(1, RaceWatch(None))


def test_a_hedge_takes_a_budget_token_and_no_token_means_no_hedge(harness, launched):
    """With one token and no refill, the first slow call's hedge takes it and the second call
    gets none: no hedge, counted as budget_exhausted."""
    h = harness(
        {
            "defaults": {
                "hedging": HEDGING,
                "budget": {"ratio": 0, "min_per_second": 0, "max_tokens": 1},
            }
        }
    )
    first, second = _race(h), _race(h)
    _slow_call(first)
    assert first.launch() is None  # max_extra 1: nothing more is due
    _slow_call(second)
    assert second.launch() is None
    budget = h.host().bucket.snapshot()
    assert (len(launched), first.launched, second.launched) == (1, 2, 1)
    assert (budget.tokens, budget.retries, budget.exhausted) == (0.0, 1, 1)


def test_hedges_on_a_uniformly_slow_host_stop_where_the_budget_does(harness, launched, clock):
    """1,000 calls, every first try slower than the delay, budget ratio 0.2 with one token and
    no refill: the hedges are the budget's 0.2 per call, at most 1 + ratio + 0.02 tries a call."""
    budget = {"ratio": 0.2, "min_per_second": 0, "max_tokens": 1}
    h = harness({"defaults": {"hedging": HEDGING, "budget": budget}})
    for _ in range(1000):
        race = _race(h)
        _slow_call(race)
        race.launch()
        clock.advance(0.3)
    tries_per_call = (1000 + len(launched)) / 1000
    assert 1.19 <= tries_per_call <= 1 + 0.2 + 0.02
    assert h.host().bucket.snapshot().exhausted == 1000 - len(launched)


def test_no_hedge_past_max_extra_max_attempts_or_the_deadline(harness, launched, clock):
    """max_extra 3 and max_attempts 3 allow hedges 2 and 3 only; a spent deadline none."""
    h = harness(
        {"defaults": {"hedging": {**HEDGING, "max_extra": 3}, "retry": {"max_attempts": 3}}}
    )
    race = _race(h)
    _slow_call(race)
    assert race.launch() is not None  # hedge 2, and hedge 3 is due a delay later
    assert race.launch() is None  # hedge 3, the last try number
    assert race.launch() is None
    assert (len(launched), race.launched) == (2, 3)
    late = _race(h, deadline=0.2)
    _slow_call(late)
    clock.advance(0.2)
    assert late.launch() is None
    assert late.launched == 1


def test_the_first_try_to_end_wins_and_every_other_is_cut(harness, launched, cuts):
    """The hedge ends first: it wins, the first try's watch is cut, and the first try, when it
    comes back, is told it lost; the host counts one hedge, one win, one cancelled."""
    h = harness({"defaults": {"hedging": HEDGING}})
    race = _race(h)
    first_watch, hedge_watch = RaceWatch(None), RaceWatch(None)
    assert race.sending(1, first_watch)
    race.launch()
    assert race.sending(2, hedge_watch)
    assert race.answered(2, 0.004)
    assert cuts == [first_watch]
    assert not race.answered(1, 0.2)
    attempt = h.first_attempt()
    told = race.settled(attempt, race.cancelled(attempt))
    assert (told.decision, told.refused, type(told.error)) == (
        Decision(Verdict.CANCELLED, Reason.HEDGE_LOST),
        None,  # it was sent: its try span ends, it is no refusal
        HedgeCancelled,
    )
    snap = h.host().hedge.snapshot()
    assert (snap.hedges, snap.wins, snap.cancelled, race.winner) == (1, 1, 1, 2)


def test_a_hedge_too_late_to_leave_is_not_sent_and_its_token_comes_back(harness, launched):
    """The first try answers while the hedge is still in the guards: the hedge reaches the
    race after it ended, is not sent, and gives back its token."""
    h = harness({"defaults": {"hedging": HEDGING}})

    def guards_then_race(attempt: Attempt) -> Outcome:
        return race_try(attempt, lambda sent: pytest.fail("a lost hedge was sent"))

    race = _race(h, chain=guards_then_race)
    _slow_call(race)
    race.launch()
    tokens = h.host().bucket.snapshot().tokens
    assert race.answered(1, 0.06)
    launched[0]()  # the worker runs the hedge now
    budget = h.host().bucket.snapshot()
    assert (budget.tokens, budget.retries) == (tokens + 1, 0)
    assert (2 in race._lost, 2 in race._sent) == (True, False)


def test_a_hedge_a_guard_refuses_gives_its_token_back(harness, launched):
    """A hedge the concurrency limit refused never went out: its token is given back."""
    h = harness({"defaults": {"hedging": HEDGING}})
    race = _race(h)
    _slow_call(race)
    race.launch()
    launched[0]()
    assert h.host().bucket.snapshot().retries == 0


def test_a_retry_the_race_left_no_try_number_for_gives_up(harness, launched):
    """max_attempts 2: the first try and its hedge used both numbers, so the first try's 503,
    ending first, gives up (max_attempts) and the token its retry took comes back."""
    h = harness({"defaults": {"hedging": HEDGING, "retry": {"max_attempts": 2}}})
    race = _race(h)
    _slow_call(race)
    race.launch()
    bucket = h.host().bucket
    assert bucket.try_withdraw()  # what the budget stage took for the planned retry
    tokens = bucket.snapshot().tokens
    retry = Outcome(decision=Decision(Verdict.RETRY, Reason.OVERLOAD, 0.1))
    told = race.settled(h.first_attempt(), retry)
    assert told.decision == Decision(Verdict.GIVE_UP, Reason.MAX_ATTEMPTS)
    assert bucket.snapshot().tokens == tokens + 1


_SUCCESS = Outcome(decision=Decision(Verdict.SUCCESS, Reason.OK))


class _SpyRun(Tries):
    """The plain run, recording each call run on it and each try resumed from."""

    def __init__(self, chain: Callable[[Attempt], Outcome], ran: list[str]) -> None:
        super().__init__(chain)
        self.ran = ran

    def __call__(self, call: Call, /) -> Outcome:
        self.ran.append("run")
        return super().__call__(call)

    def resume(self, attempt: Attempt, outcome: Outcome, /) -> Outcome:
        self.ran.append(f"resume after {attempt.number}")
        return super().resume(attempt, outcome)


def _spies() -> tuple[HedgeCalls, _SpyRun, list[str]]:
    ran: list[str] = []

    def spy(name: str) -> Callable[[Attempt], Outcome]:
        def chain(attempt: Attempt) -> Outcome:
            ran.append(name if RACE.get() is None else f"{name} in race")
            return _SUCCESS

        return chain

    return HedgeCalls(spy("first"), spy("hedge")), _SpyRun(spy("plain"), ran), ran


@pytest.mark.parametrize(
    ("config", "request_", "races"),
    [
        ({}, {}, True),
        ({}, {"method": "PUT", "body": b"x"}, True),
        ({}, {"method": "POST", "body": b"x"}, False),
        ({}, {"method": "PATCH", "body": b"x"}, False),
        ({}, {"method": "POST", "body": b"x", "headers": {"Idempotency-Key": "k"}}, True),
        ({}, {"method": "PUT", "body": iter([b"x"])}, False),
        ({"retry": {"max_attempts": 1}}, {}, False),
        ({"hedging": {"enabled": False}}, {}, False),
    ],
)
def test_which_calls_race(harness, config, request_, races):
    """Only idempotent, replayable calls with a try number to spare, to a host that hedges,
    race; every other call is run as it would be without hedging."""
    h = harness({"defaults": {"hedging": HEDGING, **config}})
    stage, run, ran = _spies()
    outcome = stage(h.first_attempt(**request_).call, run)
    assert outcome is _SUCCESS
    assert ran == (["first in race", "resume after 1"] if races else ["run", "plain"])


def test_streamed_calls_never_race(harness):
    """stream=True: the call is run on the plain chain."""
    h = harness({"defaults": {"hedging": HEDGING}})
    stage, run, ran = _spies()
    call = h.first_attempt().call
    stage(call.replace(stream=True), run)
    assert ran == ["run", "plain"]


def test_a_raced_retry_resumes_after_the_race_s_last_try_number(harness, clock):
    """The race gave out try numbers 1 and 2 and ended in a retry after 0.1 s: the call goes
    on with try 3 on the plain chain, after the wait, without running the call again."""
    h = harness({"defaults": {"hedging": HEDGING, "retry": {"max_attempts": 3}}})
    retry = Outcome(decision=Decision(Verdict.RETRY, Reason.OVERLOAD, 0.1))
    numbers: list[int] = []

    def first(attempt: Attempt) -> Outcome:
        race = RACE.get()
        assert race is not None
        race.launched = 2  # a hedge went out, and both tries failed
        numbers.append(attempt.number)
        return retry

    plain = ScriptedTransport(clock, 200)
    ran: list[str] = []
    run = _SpyRun(compose([], plain), ran)
    outcome = HedgeCalls(first, _refused)(h.first_attempt().call, run)
    assert (outcome.status, numbers, [a.number for a in plain.sent]) == (200, [1], [3])
    assert (ran, clock.sleeps) == (["resume after 2"], [0.1])


def test_the_chain_races_only_when_a_host_of_the_config_hedges(harness, clock):
    """No host hedges: no call stage, and a call runs its tries alone. One host does: the
    hedging call stage, whose racing stages put the race just inside the deadline stage,
    before the send stage, and tell the events of a lost try."""
    transport = ScriptedTransport(clock, 200)
    off = harness({}).registry.runtime
    assert call_stages(transport, off) == []
    assert call_chain(standard_chain(transport, off), transport, off) is None
    on = harness({"hosts": {"svc.test": {"hedging": HEDGING}}}).registry.runtime
    assert [type(stage) for stage in call_stages(transport, on)] == [HedgeCalls]
    slots = racing_slots(hedge=True, senders=True)
    assert slots.names() == [
        *("events", "budget", "decide", "breaker", "throttle", "limit", "deadline"),
        *("race", "send"),
    ]
    assert slots["race"] is race_try
    events = slots["events"]
    assert isinstance(events, FunctionType)
    assert events.__qualname__ == "racing_events.<locals>.emit_race_events"


def test_a_raced_call_that_ends_before_its_delay_is_one_try(harness, clock, logs):
    """auto before its first tries: a call races, nothing is hedged, its event is the usual
    one, and its try is the first of the host's latencies."""
    h = harness({"defaults": {"hedging": {"enabled": True}}})
    transport = ScriptedTransport(clock, 200)
    runtime = h.registry.runtime
    calls = call_chain(standard_chain(transport, runtime), transport, runtime)
    assert calls is not None
    outcome = calls(h.first_attempt().call)
    assert outcome.decision == Decision(Verdict.SUCCESS, Reason.OK)
    assert [(e["attempt"], e["decision"], "hedge" in e) for e in logs] == [(1, "success", False)]
    health = h.registry.health()["http://svc.test:80"]
    assert (transport.calls, health.tries, health.hedges, health.cancelled) == (1, 1, 0, 0)
    assert len(h.host().hedge._samples) == 1


def test_no_hedge_while_the_first_try_waits_for_its_own_thread(harness, launched, monkeypatch):
    """The first try's socket says its answer is in (or its request left late): no hedge goes
    and no token is taken; the race is looked at again when the socket says, and hedged then
    if the request has been out for the delay with no answer."""
    waits: list[float] = [0.05, 0.0]
    monkeypatch.setattr(RaceWatch, "hedge_wait", lambda self, delay: waits.pop(0))
    h = harness({"defaults": {"hedging": HEDGING}})
    race = _race(h)
    _slow_call(race)
    tokens = h.host().bucket.snapshot().tokens
    before = real_monotonic()
    again = race.launch()
    assert again is not None
    assert before + 0.05 <= again <= real_monotonic() + 0.05
    assert (len(launched), race.launched, h.host().bucket.snapshot().tokens) == (0, 1, tokens)
    assert race.launch() is None  # max_extra 1: nothing after this hedge
    assert (len(launched), race.launched) == (1, 2)
