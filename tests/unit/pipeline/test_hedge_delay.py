"""What a hedged call's race teaches ``delay: auto``, on a fake clock: the first try's time when
it answered on its own, the delay it outlasted when a hedge cut it or none was out against it,
and never a hedge's time; so the delay stays near the fast tries' p95 however the slow ones
fall, from one thread or from 64."""

from __future__ import annotations

import contextvars
import itertools
import random
from typing import NoReturn

import pytest

from resilient_session._pipeline.attempt import Call
from resilient_session._pipeline.hedging.race import Race
from resilient_session._pipeline.hedging.timer import TIMER
from resilient_session._state.hedge import FLOOR, WINDOW, p95
from resilient_session._transport.watchdog import WATCHDOG, RaceWatch
from tests.conftest import Harness
from tests.threads import run_together

AUTO = {"defaults": {"hedging": {"enabled": True}}}
SLOW = 1.0  # the slow tries' time, as in benchmarks/tail.py
SLOW_SHARE = 0.03


@pytest.fixture(autouse=True)
def no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hedges are handed to no worker and the timer keeps nothing: each test plays the race."""
    monkeypatch.setattr(TIMER.workers, "submit", lambda job: None)
    monkeypatch.setattr(TIMER, "schedule", lambda race, at: None)
    monkeypatch.setattr(TIMER, "cancel", lambda race: None)
    monkeypatch.setattr(WATCHDOG, "cut", lambda watch: None)


def _race(h: Harness) -> Race:
    return _race_of(h.first_attempt().call)


def _race_of(call: Call) -> Race:
    """A race for *call* whose first try has gone out."""
    assert call.state.hedge is not None
    race = Race(call, call.state.hedge, _no_hedge_runs, contextvars.copy_context())
    call.state.bucket.deposit()  # what the budget stage does for a first try
    assert race.sending(1, RaceWatch(None))
    return race


def _no_hedge_runs(attempt: object) -> NoReturn:
    pytest.fail("the race ran a hedge: these tests play each hedge's part themselves")


def _answered_alone(h: Harness, seconds: float) -> float | None:
    """A call whose first try answers after *seconds* with no hedge out; the delay it ran under."""
    race = _race(h)
    race.answered(1, seconds)
    return race._delay


def _hedge_won(h: Harness, hedge_seconds: float, first_seconds: float) -> None:
    """A call whose hedge goes out at the delay and answers after *hedge_seconds*, first: its
    first try, cut, comes back after *first_seconds*."""
    race = _race(h)
    race.launch()
    assert race.sending(2, RaceWatch(None))
    assert race.answered(2, hedge_seconds)
    assert not race.answered(1, first_seconds, fired=True)


def _first_beat_its_hedge(h: Harness, first_seconds: float) -> None:
    """A call whose hedge goes out at the delay and is still out when the first try answers."""
    race = _race(h)
    race.launch()
    assert race.sending(2, RaceWatch(None))
    assert race.answered(1, first_seconds)
    assert not race.answered(2, first_seconds - (race._delay or 0), fired=True)


def _warm(h: Harness, seconds: float = 0.02) -> float:
    for _ in range(WINDOW):
        _answered_alone(h, seconds)
    hedge = h.host().hedge
    assert hedge is not None
    assert hedge.delay() == seconds
    return seconds


def test_a_hedge_that_won_and_the_try_it_cut_teach_no_time(harness):
    """After 256 tries of 20 ms, 100 calls whose hedge answered in 4 ms while their first
    try ran on to 0.5 s: the delay stays 20 ms (neither the hedge's 4 ms nor the cut try's
    0.5 s is a time the host takes for a first try)."""
    h = harness(AUTO)
    _warm(h)
    for _ in range(100):
        _hedge_won(h, 0.004, 0.5)
    assert h.host().hedge.delay() == 0.02
    snap = h.host().hedge.snapshot()
    assert (snap.hedges, snap.wins, snap.cancelled) == (100, 100, 100)


def test_a_slow_try_no_hedge_was_out_against_counts_as_the_delay(harness):
    """With no token for a hedge, 40 first tries of 1 s in a row answer alone: each is learned
    as the 20 ms it outlasted, so the delay stays 20 ms instead of turning into the slowness
    hedging exists to cut."""
    h = harness({"defaults": {**AUTO["defaults"], "budget": {"ratio": 0, "min_per_second": 0}}})
    _warm(h)
    for _ in range(40):
        assert _answered_alone(h, SLOW) == 0.02
    assert h.host().hedge.delay() == 0.02


def test_a_try_that_answered_within_twice_its_delay_is_learned_as_measured(harness):
    """No hedge out yet (a busy machine is slow to send it), 16 first tries of 35 ms against
    a 20 ms delay: the host's spread, not tries a hedge would have beaten (it answers within
    the delay), so the delay rises to 35 ms; a try past twice the delay would count as 20."""
    h = harness(AUTO)
    _warm(h)
    for _ in range(16):
        assert _answered_alone(h, 0.035) == 0.02
    assert h.host().hedge.delay() == 0.035


def test_a_first_try_that_beat_its_hedge_is_learned_as_measured(harness):
    """A host turned slow on every try (300 ms): hedges go out at 20 ms and lose, so each first
    try's 300 ms is the host's; once they are 5 % of the window the delay is 300 ms, and
    the next 300 ms try is no longer hedged."""
    h = harness(AUTO)
    _warm(h)
    for _ in range(16):
        _first_beat_its_hedge(h, 0.3)
    assert h.host().hedge.delay() == 0.3


def test_a_first_try_the_deadline_cut_before_its_delay_is_not_learned(harness):
    """Tries the deadline ended after 5 ms, before their 20 ms delay, say only that they lasted
    5 ms: 256 of them leave the delay at 20 ms; one the deadline ended past its delay is
    learned as that delay."""
    h = harness(AUTO)
    _warm(h)
    for _ in range(WINDOW):
        race = _race(h)
        race.answered(1, 0.005, fired=True)
    hedge = h.host().hedge
    assert hedge is not None
    assert (hedge.delay(), min(hedge._samples)) == (0.02, 0.02)


class _Host:
    """A host whose tries take 5 ms plus an exponential wait (mean 4 ms), and 1 s for a
    *slow_share* of first tries drawn at random; every fast time it gave, kept."""

    def __init__(self, seed: int, slow_share: float = SLOW_SHARE) -> None:
        self.rng = random.Random(seed)
        self.slow_share = slow_share
        self.fast: list[float] = []

    def fast_try(self) -> float:
        seconds = 0.005 + self.rng.expovariate(1 / 0.004)
        self.fast.append(seconds)
        return seconds

    def first_try(self) -> float:
        return SLOW if self.rng.random() < self.slow_share else self.fast_try()


def _call(call: Call, host: _Host) -> float | None:
    """One hedged call as the race plays it; the delay it ran under."""
    first = host.first_try()
    race = _race_of(call)
    delay = race._delay
    if delay is not None and first >= delay:
        race.launch()  # a hedge at the delay, if a token pays for it
    if race.launched == 1:
        race.answered(1, first)  # answered before its delay, or no hedge could go
        return delay
    assert delay is not None
    assert race.sending(2, RaceWatch(None))
    hedge = host.fast_try()
    if delay + hedge < first:
        assert race.answered(2, hedge)
        assert not race.answered(1, delay + hedge, fired=True)
    else:
        assert race.answered(1, first)
        assert not race.answered(2, first - delay, fired=True)
    return delay


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_auto_stays_near_the_fast_tries_p95_when_3_percent_are_slow(harness):
    """5,000 calls, 3 % of first tries 1 s and cut by a hedge at the delay: once the window is
    full, every call's delay lies between the fast tries' p90 and p99.5, however the slow
    ones bunch in a window (the delay does not climb with the cut tries' times)."""
    h = harness(AUTO)
    host, call = _Host(seed=7), h.first_attempt().call
    delays = [_call(call, host) for _ in range(5000)]
    settled = [delay for delay in delays[2 * WINDOW :] if delay is not None]
    low, high = _quantile(host.fast, 0.90), _quantile(host.fast, 0.995)
    assert low <= min(settled)
    assert max(settled) <= high
    assert _quantile(host.fast, 0.94) <= p95(settled) <= _quantile(host.fast, 0.99)


def test_auto_stays_bounded_under_64_concurrent_recorders(harness, monkeypatch):
    """64 threads racing 300 calls each on one host, 3 % of first tries 1 s: every delay any
    call ran under (the window full from the start) lies between the floor and the fast
    tries' p99.5, only first tries were learned, and every hedge either won or was cut."""
    h = harness(AUTO)
    hedge = h.host().hedge
    assert hedge is not None
    learned = itertools.count()
    record = hedge.record

    def counted(seconds: float) -> None:
        next(learned)
        record(seconds)

    monkeypatch.setattr(hedge, "record", counted)
    warm = _Host(seed=0, slow_share=0)
    for _ in range(WINDOW):
        _answered_alone(h, warm.fast_try())
    hosts = [_Host(seed=index + 1) for index in range(64)]
    seen: list[list[float | None]] = [[] for _ in hosts]

    def calls(index: int) -> None:
        call = h.first_attempt().call
        for _ in range(300):
            seen[index].append(_call(call, hosts[index]))

    run_together(64, calls)
    delays = [delay for each in seen for delay in each]
    fast = [seconds for host in [warm, *hosts] for seconds in host.fast]
    assert None not in delays
    assert min(d for d in delays if d is not None) >= FLOOR
    assert max(d for d in delays if d is not None) <= _quantile(fast, 0.995)
    snap = h.host().hedge.snapshot()
    assert snap.hedges == snap.cancelled  # every hedge sent either won or was cut
    assert 0.03 * 64 * 300 <= snap.hedges <= 0.10 * 64 * 300
    assert next(learned) == WINDOW + 64 * 300  # one latency a call: its first try's
