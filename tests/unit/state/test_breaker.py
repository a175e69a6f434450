"""The circuit breaker state machine, its timings, and its behaviour under many threads."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from resilient_session._pipeline.attempt import Reason
from resilient_session._pipeline.drive import drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.breaker import (
    BreakerState,
    CircuitBreaker,
    Permit,
    Transition,
    TryResult,
)
from resilient_session.config.policy import BreakerPolicy
from resilient_session.testing import FakeClock, ScriptedTransport
from tests.threads import run_together

LEGAL = {
    (BreakerState.CLOSED, BreakerState.OPEN),
    (BreakerState.OPEN, BreakerState.HALF_OPEN),
    (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    (BreakerState.HALF_OPEN, BreakerState.OPEN),
}


def make(clock: FakeClock, **policy: object) -> CircuitBreaker:
    return CircuitBreaker("http://svc.test:80", BreakerPolicy(**policy), clock, random.Random(0))  # type: ignore[arg-type]


def fail(breaker: CircuitBreaker, times: int = 1) -> list[Transition]:
    transitions = []
    for _ in range(times):
        permit, moved = breaker.allow()
        assert permit is not None
        transitions += [moved] if moved else []
        _, recorded = breaker.record(permit, TryResult.FAILURE)
        transitions += [recorded] if recorded else []
    return transitions


def succeed(breaker: CircuitBreaker) -> BreakerState:
    permit, _ = breaker.allow()
    assert permit is not None
    return breaker.record(permit, TryResult.SUCCESS)[0]


def test_opens_after_consecutive_failures(clock):
    """Nineteen failures leave it closed; the twentieth opens it and returns the transition."""
    breaker = make(clock)
    assert fail(breaker, 19) == []
    assert breaker.state is BreakerState.CLOSED
    assert fail(breaker) == [Transition(breaker.host, BreakerState.CLOSED, BreakerState.OPEN, 1)]
    assert breaker.allow() == (None, None)


def test_success_resets_the_consecutive_count(clock):
    """A success between failures restarts the count."""
    breaker = make(clock, failure_threshold=3)
    fail(breaker, 2)
    succeed(breaker)
    fail(breaker, 2)
    assert breaker.state is BreakerState.CLOSED


def test_neutral_results_neither_count_nor_reset(clock):
    """Neutral tries (TLS errors, local refusals) leave the count where it was."""
    breaker = make(clock, failure_threshold=2)
    fail(breaker)
    permit, _ = breaker.allow()
    assert permit is not None
    breaker.record(permit, TryResult.NEUTRAL)
    fail(breaker)
    assert breaker.state is BreakerState.OPEN


def test_first_opening_lasts_exactly_recovery_timeout(clock):
    """Opening 1 refuses until recovery_timeout has passed, then admits one probe."""
    breaker = make(clock, failure_threshold=1, recovery_timeout=5.0)
    fail(breaker)
    clock.advance(4.999)
    assert breaker.allow()[0] is None
    clock.advance(0.001)
    permit, moved = breaker.allow()
    assert permit is not None
    assert permit.probe
    assert moved == Transition(breaker.host, BreakerState.OPEN, BreakerState.HALF_OPEN, 2)
    assert breaker.allow()[0] is None  # half_open_max_calls = 1


def test_probe_success_closes(clock):
    """A successful probe closes the breaker."""
    breaker = make(clock, failure_threshold=1, recovery_timeout=1.0)
    fail(breaker)
    clock.advance(1.0)
    assert succeed(breaker) is BreakerState.CLOSED


def test_after_fork_frees_the_probe_slot_and_the_lock(clock):
    """In a forked child, a half-open probe and the lock a parent's thread held at the fork
    are free: the child's breaker admits one probe (and only one), whose success closes it."""
    breaker = make(clock, failure_threshold=1, recovery_timeout=1.0)
    fail(breaker)
    clock.advance(1.0)
    parents, _ = breaker.allow()
    assert parents is not None
    assert parents.probe
    assert breaker.allow()[0] is None
    assert breaker._lock.acquire(blocking=False)  # as a parent's thread inside it would
    breaker.after_fork()
    childs, _ = breaker.allow()
    assert childs is not None
    assert childs.probe
    assert breaker.allow()[0] is None
    assert breaker.record(childs, TryResult.SUCCESS)[0] is BreakerState.CLOSED


def reopen_durations(clock: FakeClock, breaker: CircuitBreaker, count: int) -> list[float]:
    """How long each of *count* consecutive openings lasted."""
    durations = []
    fail(breaker)
    for _ in range(count):
        opened_at = clock.now
        permit, _ = breaker.allow()
        for _ in range(10_000):
            if permit is not None:
                break
            clock.advance(0.01)
            permit, _ = breaker.allow()
        assert permit is not None
        assert permit.probe
        durations.append(clock.now - opened_at)
        _, moved = breaker.record(permit, TryResult.FAILURE)
        assert moved is not None
        assert moved.to_state is BreakerState.OPEN
    return durations


def test_reopenings_double_with_jitter_up_to_the_max(clock):
    """Openings last 5, 5-6, 10-12, 20-24, then cap at recovery_timeout_max."""
    breaker = make(clock, failure_threshold=1, recovery_timeout=5.0, recovery_timeout_max=30.0)
    first, second, third, fourth, fifth, sixth = reopen_durations(clock, breaker, 6)
    assert first == pytest.approx(5.0, abs=0.011)
    assert 5.0 <= second <= 6.011
    assert 10.0 <= third <= 12.011
    assert 20.0 <= fourth <= 24.011
    assert 27.5 <= fifth <= 30.011
    assert sixth <= 30.011


def test_failure_rate_window_opens(clock):
    """With a window of 10 and a 50% threshold, 5 failures among 10 calls open it."""
    breaker = make(clock, failure_threshold=100, window=10, minimum_calls=10)
    for index in range(9):
        if index % 2:
            fail(breaker)
        else:
            succeed(breaker)
    assert breaker.state is BreakerState.CLOSED  # 4 failures in 9 calls, under minimum_calls
    fail(breaker)
    assert breaker.snapshot().state is BreakerState.OPEN


def test_failure_rate_window_slides(clock):
    """Only the last `window` calls count: after 20 successes, 5 failures in 10 calls open it."""
    breaker = make(clock, failure_threshold=100, window=10, minimum_calls=10)
    for _ in range(20):
        succeed(breaker)
    fail(breaker, 4)
    assert breaker.state is BreakerState.CLOSED
    fail(breaker)
    assert breaker.snapshot().state is BreakerState.OPEN


def test_stale_result_ignored(clock):
    """A try admitted before the breaker opened does not count in the new state."""
    breaker = make(clock, failure_threshold=1, recovery_timeout=1.0)
    slow, _ = breaker.allow()
    assert slow is not None
    fail(breaker)
    clock.advance(1.0)
    probe, _ = breaker.allow()
    assert probe is not None
    assert breaker.record(slow, TryResult.SUCCESS) == (BreakerState.HALF_OPEN, None)
    assert breaker.record(probe, TryResult.SUCCESS)[0] is BreakerState.CLOSED


def test_snapshot_counts(clock):
    """The snapshot counts tries, failures and refusals."""
    breaker = make(clock, failure_threshold=2)
    fail(breaker, 2)
    breaker.allow()
    snap = breaker.snapshot()
    assert (snap.state, snap.tries, snap.failures, snap.rejected, snap.openings) == (
        BreakerState.OPEN,
        2,
        2,
        1,
        1,
    )
    assert snap.open_for == pytest.approx(5.0)


def test_transitions_numbered_in_order_per_breaker(clock):
    """Each breaker numbers its own transitions 1, 2, 3, ...; another breaker starts at 1."""
    breaker = make(clock, failure_threshold=1, recovery_timeout=1.0)
    other = make(clock, failure_threshold=1)
    moves = fail(breaker)
    clock.advance(1.0)
    permit, moved = breaker.allow()
    assert permit is not None
    assert moved is not None
    moves.append(moved)
    moves.append(breaker.record(permit, TryResult.FAILURE)[1])  # type: ignore[arg-type]
    moves += fail(other)
    assert [(t.host, t.seq, t.from_state.value, t.to_state.value) for t in moves] == [
        (breaker.host, 1, "closed", "open"),
        (breaker.host, 2, "open", "half_open"),
        (breaker.host, 3, "half_open", "open"),
        (other.host, 1, "closed", "open"),
    ]


def test_try_refused_inside_is_no_try_and_frees_its_probe_slot(clock):
    """A probe admitted by the breaker but refused by the deadline stage (sent false) counts
    as refused inside, not as a try, and leaves the slot for the next probe."""
    breaker = make(clock, failure_threshold=1, recovery_timeout=1.0)
    fail(breaker)
    clock.advance(1.0)
    probe, _ = breaker.allow()
    assert probe is not None
    assert breaker.record(probe, TryResult.NEUTRAL, False) == (BreakerState.HALF_OPEN, None)
    closed_permit = breaker.allow()[0]
    assert closed_permit is not None
    assert breaker.record(closed_permit, TryResult.SUCCESS)[0] is BreakerState.CLOSED
    permit, _ = breaker.allow()
    assert permit is not None
    breaker.record(permit, TryResult.NEUTRAL, False)
    snap = breaker.snapshot()
    assert (snap.tries, snap.refused_inside, snap.rejected, snap.state) == (
        2,
        2,
        0,
        BreakerState.CLOSED,
    )


class BreakerMachine(RuleBasedStateMachine):
    """Any interleaving of admissions, results and time keeps the breaker legal."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.breaker = make(
            self.clock,
            failure_threshold=3,
            recovery_timeout=1.0,
            recovery_timeout_max=4.0,
            half_open_max_calls=2,
        )
        self.permits: list[Permit] = []
        self.state = BreakerState.CLOSED
        self.probes_out = 0

    def _follow(self, transition: Transition | None) -> None:
        if transition is not None:
            assert transition.from_state is self.state
            assert (transition.from_state, transition.to_state) in LEGAL
            self.state = transition.to_state

    @rule()
    def admit(self) -> None:
        permit, moved = self.breaker.allow()
        self._follow(moved)
        if permit is not None:
            self.permits.append(permit)
        elif self.state is BreakerState.CLOSED:
            raise AssertionError("a closed breaker refused a try")

    @precondition(lambda self: bool(self.permits))
    @rule(index=st.integers(min_value=0), result=st.sampled_from(list(TryResult)))
    def finish(self, index: int, result: TryResult) -> None:
        permit = self.permits.pop(index % len(self.permits))
        state, moved = self.breaker.record(permit, result)
        self._follow(moved)
        assert state is self.state

    @rule(seconds=st.floats(min_value=0, max_value=6))
    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def probes_bounded(self) -> None:
        assert 0 <= self.breaker._probes <= 2
        assert self.breaker.state is self.state


TestBreakerMachine = BreakerMachine.TestCase
TestBreakerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_hammer_closed_and_open(clock):
    """16 threads x 1,000 admissions and results on a frozen clock keep counts exact."""
    breaker = make(clock, failure_threshold=10**9)

    def work(seed: int) -> None:
        chooser = random.Random(seed)
        for _ in range(1000):
            permit, _ = breaker.allow()
            assert permit is not None
            breaker.record(
                permit, TryResult.FAILURE if chooser.random() < 0.5 else TryResult.SUCCESS
            )

    run_together(16, work)
    snap = breaker.snapshot()
    assert (snap.tries, snap.state) == (16_000, BreakerState.CLOSED)


def test_hammer_opening_while_admitting_without_the_lock(clock):
    """16 threads admit and fail tries while the breaker opens: it opens exactly once, every
    admission is either counted as a try or as a refusal, and no stale result reopens it."""
    breaker = make(clock, failure_threshold=50)
    transitions: list[Transition] = []
    counts = Counter[str]()
    lock = threading.Lock()

    def work(_: int) -> None:
        admitted = refused = 0
        seen = []
        for _ in range(1000):
            permit, moved = breaker.allow()
            if moved is not None:
                seen.append(moved)
            if permit is None:
                refused += 1
                continue
            admitted += 1
            recorded = breaker.record(permit, TryResult.FAILURE)[1]
            if recorded is not None:
                seen.append(recorded)
        with lock:
            transitions.extend(seen)
            counts.update(admitted=admitted, refused=refused)

    run_together(16, work)
    snap = breaker.snapshot()
    assert [(t.from_state, t.to_state) for t in transitions] == [
        (BreakerState.CLOSED, BreakerState.OPEN)
    ]
    assert snap.state is BreakerState.OPEN
    assert (snap.tries, snap.rejected) == (counts["admitted"], counts["refused"])
    assert counts["admitted"] + counts["refused"] == 16_000
    assert 50 <= counts["admitted"] < 16_000


@pytest.mark.parametrize("max_probes", [1, 3])
def test_64_threads_in_half_open_admit_exactly_max_probes(harness, clock, max_probes):
    """64 threads calling a half-open host at once: exactly half_open_max_calls reach it."""
    h = harness(
        {
            "defaults": {
                "breaker": {
                    "failure_threshold": 1,
                    "recovery_timeout": 1.0,
                    "half_open_max_calls": max_probes,
                }
            }
        }
    )
    h.run(500)
    clock.advance(1.0)
    release = threading.Event()
    inside = threading.Semaphore(0)
    barrier = threading.Barrier(64)
    reached = Counter[str]()
    lock = threading.Lock()

    def slow_upstream(attempt):
        with lock:
            reached["hits"] += 1
        inside.release()
        release.wait(timeout=10)
        return ScriptedTransport(clock, 200)(attempt)

    chain = standard_chain(slow_upstream, clock=clock, rng=h.rng)
    results: list[object] = []

    def call() -> None:
        attempt = h.first_attempt()
        barrier.wait()
        outcome = drive(chain, attempt, clock)
        with lock:
            results.append(outcome.decision.reason)

    threads = [threading.Thread(target=call) for _ in range(64)]
    for thread in threads:
        thread.start()
    for _ in range(max_probes):
        assert inside.acquire(timeout=10)
    # Every other thread has been refused while the probes are held open.
    for _ in range(200):
        with lock:
            if len(results) == 64 - max_probes:
                break
        release.wait(timeout=0.01)
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert reached["hits"] == max_probes
    reasons = Counter(results)
    assert reasons[Reason.OK] == max_probes
    assert reasons[Reason.BREAKER_OPEN] == 64 - max_probes
    assert h.host().breaker.state is BreakerState.CLOSED


def test_probe_permit_released_when_inner_stage_raises(harness, clock):
    """An exception inside the breaker stage frees the half-open slot for the next probe."""
    h = harness({"defaults": {"breaker": {"failure_threshold": 1, "recovery_timeout": 1.0}}})
    h.run(500)
    clock.advance(1.0)

    def exploding(attempt):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        drive(standard_chain(exploding, clock=clock, rng=h.rng), h.first_attempt(), clock)
    outcome, transport = h.run(200)
    assert (transport.calls, outcome.status) == (1, 200)


def test_default_stays_closed_when_half_the_tries_fail_at_random(clock):
    """A host failing half its tries at random is the throttle's case, not the breaker's: the
    default threshold of 20 consecutive failures is not reached in 20,000 such tries (a run of
    20 comes about once in two million tries)."""
    breaker = make(clock)
    coin = random.Random(7)
    for _ in range(20_000):
        if coin.random() < 0.5:
            fail(breaker)
        else:
            succeed(breaker)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.snapshot().openings == 0


def test_default_opens_within_twenty_tries_of_a_total_outage(clock):
    """A host that is down is still cut off fast: the twentieth failure in a row opens it."""
    breaker = make(clock)
    opened_at = next(n for n in range(1, 100) if fail(breaker))
    assert opened_at == 20
