"""A host's hedging state: the delay ``auto`` reads (recent p95, floor, warm-up), a fixed
delay, and the counts health shows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_session._state.hedge import EVERY, FLOOR, MIN_SAMPLES, WINDOW, HedgeState, p95
from resilient_session.config.policy import HedgingPolicy
from tests.threads import run_together

AUTO = HedgingPolicy(enabled=True)


def _fed(*latencies: float, policy: HedgingPolicy = AUTO) -> HedgeState:
    state = HedgeState(policy)
    for seconds in latencies:
        state.record(seconds)
    return state


def test_auto_sends_no_hedge_before_enough_tries():
    """auto has no delay (no hedge) until MIN_SAMPLES tries were seen, then the p95 of them."""
    state = _fed(*[0.05] * (MIN_SAMPLES - 1))
    assert state.delay() is None
    state.record(0.05)
    assert state.delay() == 0.05


def test_auto_is_the_p95_of_recent_tries():
    """97 tries of 20 ms and 3 of 1 s: the p95 is 20 ms, so only the slow ones outlast it."""
    state = _fed(*([0.02] * 97 + [1.0] * 3))
    # Read every EVERY tries: 100 tries were seen, the last reading at 96.
    assert state.delay() == 0.02


def test_auto_never_goes_below_the_floor():
    """A host answering in 1 ms is hedged after 10 ms, not 1."""
    assert _fed(*[0.001] * 64).delay() == FLOOR == 0.010


def test_auto_on_a_host_slow_on_every_try_waits_out_its_slowness():
    """Every try 300 ms: the delay is the slowness itself, so a 300 ms try is never hedged."""
    state = _fed(*[0.3] * 64)
    assert (state.delay() or 0) >= 0.3


def test_auto_follows_the_host_when_it_turns_slow_and_back():
    """The window holds the last WINDOW tries: a host that turns slow has a slow p95 once
    more than 5 % of the window is slow, and a fast one again once they have passed."""
    state = _fed(*[0.02] * WINDOW)
    assert state.delay() == 0.02
    for _ in range(WINDOW):
        state.record(0.5)
    assert state.delay() == 0.5
    for _ in range(WINDOW):
        state.record(0.02)
    assert state.delay() == 0.02


def test_a_fixed_delay_holds_from_the_first_call():
    """delay: 0.05 hedges after 50 ms from the first call on, whatever the latencies."""
    state = _fed(policy=HedgingPolicy(enabled=True, delay=0.05))
    assert state.delay() == 0.05
    for _ in range(100):
        state.record(2.0)
    assert state.delay() == 0.05


def test_a_calls_own_delay_is_its_own_or_the_hosts_learnt_one():
    """A call whose settings keep the host's delay gets the host's; a fixed one its own; auto
    the p95 the host learns, or None on a host with a fixed delay, which learns none."""
    learnt = _fed(*[0.3] * MIN_SAMPLES)
    auto, fixed = HedgingPolicy(enabled=True), HedgingPolicy(enabled=True, delay=0.5)
    assert (learnt.delay_for(auto), learnt.delay_for(fixed)) == (learnt.delay(), 0.5)
    assert learnt.delay() == 0.3
    steady = HedgeState(HedgingPolicy(enabled=True, delay=0.05))
    for _ in range(100):
        steady.learn(2.0, 0.05, raced=False, cut=False)
    assert (steady.delay_for(steady.policy), steady.delay_for(fixed)) == (0.05, 0.5)
    assert steady.delay_for(auto) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=60), min_size=MIN_SAMPLES, max_size=600))
def test_auto_stays_between_the_floor_and_the_slowest_recent_try(latencies):
    """Whatever the latencies, auto's delay is at least the floor and at most the slowest of
    the tries in the window when it was last read."""
    state = _fed(*latencies)
    delay = state.delay()
    assert delay is not None
    # Read at the MIN_SAMPLES-th try, then at every multiple of EVERY past it.
    last_multiple = len(latencies) // EVERY * EVERY
    read_at = last_multiple if last_multiple > MIN_SAMPLES else MIN_SAMPLES
    window = latencies[:read_at][-WINDOW:]
    assert FLOOR <= delay <= max(FLOOR, *window)
    assert delay == max(FLOOR, p95(window))


def test_p95_is_the_nearest_rank():
    """Of 1..100 the p95 is 95; of one value, that value."""
    assert p95([float(n) for n in range(100, 0, -1)]) == 95.0
    assert p95([0.3]) == 0.3


def test_counts_are_exact_under_threads():
    """16 threads counting hedges, wins and cancellations, and recording latencies, lose none."""
    state = _fed()

    def work(index: int) -> None:
        for _ in range(1000):
            state.count(hedges=1, wins=index % 2, cancelled=1 - index % 2)
            state.record(0.001 * index)

    run_together(16, work)
    snap = state.snapshot()
    assert (snap.hedges, snap.wins, snap.cancelled) == (16_000, 8_000, 8_000)
    assert FLOOR <= (snap.delay or 0) <= 0.015
