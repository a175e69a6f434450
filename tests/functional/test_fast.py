"""testing.fast(): retries on the system clock wait no real time, and decide as real time would."""

from __future__ import annotations

import random
import time

import pytest
import responses

from resilient_session import ResilientSession
from resilient_session.clock import SYSTEM_CLOCK, SystemClock
from resilient_session.testing import FakeClock, fast

URL = "http://svc.test/items"
FLAKY = (503, 503, 200)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every real sleep asked of ``time.sleep``: the spy that shows none happened."""
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", calls.append)
    return calls


def _play(mock: responses.RequestsMock, *answers: int | tuple[int, dict[str, str]]) -> None:
    for answer in answers:
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        mock.get(URL, status=status, headers=headers)


def test_503_503_200_makes_three_tries_and_sleeps_not_at_all(mock, slept):
    """Under fast(), 503, 503, 200 is still three tries and a 200; the two waits are recorded
    and the system clock is never asked to really sleep."""
    _play(mock, *FLAKY)
    with fast() as mode:
        response = ResilientSession().get(URL)
    assert response.status_code == 200
    assert len(mock.calls) == 3
    assert len(mode.waits) == 2
    assert all(wait > 0 for wait in mode.waits)
    assert slept == []


def test_waits_are_those_of_a_fake_clock_with_the_same_seed(mock, slept):
    """The waits fast() records are exactly those a FakeClock session seeded alike sleeps:
    the same decisions, the same jitter, run after run."""
    _play(mock, *FLAKY, *FLAKY, *FLAKY)
    with fast(seed=7) as mode:
        ResilientSession().get(URL)
        ResilientSession().get(URL)
    clock = FakeClock()
    ResilientSession(clock=clock, rng=random.Random(7)).get(URL)
    assert mode.waits == clock.sleeps * 2
    assert slept == []


def test_a_deadline_that_a_skipped_wait_would_spend_still_ends_the_call(mock, slept):
    """Retry-After 0.6 twice within a 1 s deadline: the second wait does not fit, as in real
    time, so the call ends with the 503 after two tries although no wait was slept."""
    _play(mock, (503, {"Retry-After": "0.6"}), (503, {"Retry-After": "0.6"}))
    with fast() as mode:
        response = ResilientSession().get(URL, deadline=1.0)
    assert response.status_code == 503
    assert len(mock.calls) == 2
    assert mode.waits == [0.6]
    assert slept == []


def test_the_clock_moves_on_by_what_was_skipped_and_comes_back_after(slept):
    """While on, the system clock reads as if its sleeps had passed; after, it is real time
    again and its methods are the originals (nothing left on the hot path)."""
    before = {name: SystemClock.__dict__[name] for name in ("monotonic", "wall", "sleep")}
    with fast() as mode:
        start, wall = SYSTEM_CLOCK.monotonic(), SYSTEM_CLOCK.wall()
        SYSTEM_CLOCK.sleep(3600.0)
        assert SYSTEM_CLOCK.monotonic() - start >= 3600.0
        assert SYSTEM_CLOCK.wall() - wall >= 3600.0
    assert mode.waits == [3600.0]
    assert slept == []
    assert {name: SystemClock.__dict__[name] for name in before} == before
    assert SystemClock.monotonic is time.monotonic  # the original, restored


def test_fast_off_inside_fast_on_sleeps_for_real_then_restores(slept):
    """fast(False) inside fast() turns it off for its block only; restoring twice is harmless."""
    with fast() as outer:
        with fast(False):
            SYSTEM_CLOCK.sleep(0.25)
        SYSTEM_CLOCK.sleep(0.5)
        outer.restore()
        outer.restore()
        SYSTEM_CLOCK.sleep(0.75)
    assert slept == [0.25, 0.75]
    assert outer.waits == [0.5]


def test_called_as_a_function_it_stays_on_until_restored(mock, slept):
    """fast() takes effect when called, without a with block, until restore()."""
    _play(mock, *FLAKY)
    mode = fast()
    try:
        assert ResilientSession().get(URL).status_code == 200
    finally:
        mode.restore()
    assert (len(mock.calls), len(mode.waits), slept) == (3, 2, [])
