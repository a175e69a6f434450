"""The limit stage in the standard chain: what each outcome does to the limit, and refusals."""

from __future__ import annotations

import pytest
import requests

from resilient_session._pipeline.attempt import Attempt, Outcome, Reason, Verdict
from resilient_session._pipeline.drive import drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.limit import ConcurrencyLimit, Signal
from resilient_session.errors import CircuitOpenError, ConcurrencyLimitError, DeadlineExceeded
from resilient_session.testing import build_response
from tests.conftest import Harness

HOST = "http://svc.test:80"
ONE_TRY = {"max_attempts": 1}


def limit_of(h: Harness) -> ConcurrencyLimit:
    limit = h.host().limit
    assert limit is not None
    return limit


@pytest.mark.parametrize(
    ("step", "after", "why"),
    [
        (200, 3, "success"),
        (404, 3, "answered: the host took it"),
        (429, 1, "overload: drop"),
        (503, 1, "overload: drop"),
        (500, 2, "a failure, not slowness: ignored"),
        (502, 2, "a failure, not slowness: ignored"),
        (requests.ConnectionError("reset"), 1, "transport error: drop"),
        (requests.ReadTimeout("read timed out"), 1, "the host's own timeout: drop"),
        (requests.exceptions.SSLError("bad cert"), 2, "ours, not the host's: ignored"),
    ],
)
def test_what_each_outcome_does_to_the_limit(harness, step, after, why):
    """From 2 with one try in flight (near): a success grows it to 3, a drop takes it to
    1.8, read 1, anything else leaves it at 2."""
    h = harness({"defaults": {"retry": ONE_TRY, "limit": {"initial": 2, "min": 1}}})
    h.run(step)
    assert limit_of(h).snapshot().limit == after, why


@pytest.mark.parametrize(
    ("step", "timeout", "latency", "after"),
    [
        # Cut at 1 s by the deadline; the host had 5 s of its own: the caller was impatient.
        (requests.ReadTimeout("read timed out"), (5, 5), 1.0, 2),
        # DeadlineExceeded after 2 s, past the host's own read timeout of 1 s: slow.
        (DeadlineExceeded("deadline ran out"), (1, 1), 2.0, 1),
        # The same after 2 s of a 5 s read timeout: not yet slow by the host's own measure.
        (DeadlineExceeded("deadline ran out"), (5, 5), 2.0, 2),
    ],
)
def test_deadline_cut_is_a_drop_only_past_the_hosts_own_timeout(
    harness, step, timeout, latency, after
):
    h = harness({"defaults": {"retry": ONE_TRY, "limit": {"initial": 2, "min": 1}}})
    outcome, _ = h.run(
        step, latency=latency, timeout=timeout, deadline=10.0 if latency > 1 else 1.0
    )
    assert isinstance(outcome.error, DeadlineExceeded)
    assert limit_of(h).snapshot().limit == after


def test_a_full_limit_refuses_the_first_try_after_max_wait(harness, clock, logs):
    """Nothing sent; the caller gets ConcurrencyLimitError (a CircuitOpenError and a
    ConnectionError) naming the host; the event says fail_fast/concurrency_limit; the
    breaker counts nothing; health counts it in limited and refused."""
    h = harness(
        {"defaults": {"limit": {"initial": 4, "initial_burst": 4, "min": 4, "max_wait": 0.25}}}
    )
    limit = limit_of(h)
    for _ in range(4):
        assert limit.acquire(None)
    outcome, transport = h.run(200)
    assert (transport.calls, clock.sleeps) == (0, [0.25])
    assert (outcome.decision.verdict, outcome.decision.reason) == (
        Verdict.FAIL_FAST,
        Reason.CONCURRENCY_LIMIT,
    )
    with pytest.raises(ConcurrencyLimitError) as raised:
        outcome.unwrap()
    assert isinstance(raised.value, CircuitOpenError)
    assert isinstance(raised.value, requests.ConnectionError)
    assert str(raised.value) == (
        f"concurrency limit for {HOST} is full (4 tries in flight) and no slot freed in time; "
        "the try was not sent"
    )
    [event] = [event for event in logs if event["event"] == "http.try"]
    assert (event["decision"], event["reason"]) == ("fail_fast", "concurrency_limit")
    health = h.registry.health()[HOST]
    assert (health.tries, health.failures, health.rejected, health.deadline_spent) == (0, 0, 0, 0)
    assert (health.limited, health.refused, health.limit, health.in_flight) == (1, 1, 4, 4)


def test_a_refused_retry_ends_the_call_with_the_last_real_try(harness, clock):
    """The first try answers 503 while three others fill the limit; the 503 drops it to 3,
    which they hold: the retry is refused at once (max_wait 0) and the caller gets the 503,
    as after breaker_open."""
    h = harness({"defaults": {"limit": {"initial": 4, "min": 3, "max_wait": 0.0}}})
    limit = limit_of(h)
    sent: list[Attempt] = []

    def transport(attempt: Attempt) -> Outcome:
        sent.append(attempt)
        for _ in range(3):
            assert limit.acquire(None)  # the others, still in flight when this try ends
        return Outcome(response=build_response(attempt.request, 503))

    chain = standard_chain(transport, clock=clock, rng=h.rng)
    outcome = drive(chain, h.first_attempt(), clock)
    assert len(sent) == 1
    assert outcome.decision.reason is Reason.CONCURRENCY_LIMIT
    assert outcome.unwrap().status_code == 503
    health = h.registry.health()[HOST]
    assert (health.tries, health.limited, health.refused, health.retries) == (1, 1, 1, 1)


def test_a_refused_probe_gives_the_half_open_slot_back(harness, clock):
    """A half-open breaker's probe refused by the limit was never sent: the next try probes."""
    h = harness(
        {
            "defaults": {
                "retry": ONE_TRY,
                "breaker": {"failure_threshold": 1, "recovery_timeout": 1.0},
                # No burst: the 500 says nothing of capacity, so the host has not answered.
                "limit": {"initial": 4, "initial_burst": 4, "min": 4, "max_wait": 0.0},
            }
        }
    )
    h.run(500)
    clock.advance(1.0)
    limit = limit_of(h)
    for _ in range(4):
        assert limit.acquire(None)
    refused, _ = h.run(200)
    assert refused.decision.reason is Reason.CONCURRENCY_LIMIT
    for _ in range(4):
        limit.release(Signal.IGNORE)
    probed, transport = h.run(200)
    assert (probed.decision.reason, transport.calls) == (Reason.OK, 1)
    assert h.registry.health()[HOST].breaker.value == "closed"
