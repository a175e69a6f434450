"""breaker.transition events carry a per-breaker seq that restores their order across threads."""

from __future__ import annotations

import itertools
import random
import threading

from resilient_session._pipeline.attempt import Outcome
from resilient_session._pipeline.stages.breaker import guard_with_breaker
from resilient_session._state.breaker import BreakerState
from resilient_session.testing import build_response
from tests.threads import run_together

THREADS = 64
ROUNDS = 200


def test_64_threads_transitions_sorted_by_seq_form_one_chain(harness, clock, logs):
    """64 threads drive one breaker through hundreds of transitions on a fake clock: sorted by
    seq, the events run 1, 2, 3, ... and each one's from is the previous one's to."""
    h = harness(
        {
            "defaults": {
                "breaker": {
                    "failure_threshold": 2,
                    "recovery_timeout": 0.01,
                    "recovery_timeout_max": 0.01,
                    "half_open_max_calls": 2,
                }
            }
        }
    )
    breaker = h.host().breaker
    attempts = [h.first_attempt() for _ in range(THREADS)]
    refused = [0] * THREADS
    lock = threading.Lock()

    def work(index: int) -> None:
        attempt = attempts[index]
        chooser = random.Random(index)

        def upstream(sent: object) -> Outcome:
            status = 500 if chooser.random() < 0.5 else 200
            return Outcome(response=build_response(attempt.request, status))

        for _ in range(ROUNDS):
            outcome = guard_with_breaker(attempt, upstream)
            if outcome.refused is not None:
                refused[index] += 1
                # Time passes only while the breaker refuses, so it keeps coming back.
                with lock:
                    clock.advance(0.004)

    run_together(THREADS, work)
    moves = [event for event in logs if event["event"] == "breaker.transition"]
    ordered = sorted(moves, key=lambda event: event["seq"])
    assert [event["seq"] for event in ordered] == list(range(1, len(moves) + 1))
    assert ordered[0]["from"] == "closed"
    for previous, event in itertools.pairwise(ordered):
        assert event["from"] == previous["to"], (previous, event)
    assert BreakerState(ordered[-1]["to"]) is breaker.state
    assert len(moves) >= 100
    assert sum(refused) == breaker.snapshot().rejected
