"""The timer and the workers that send hedges: every job runs on a bounded set of threads, a
due race is launched, a cancelled one never is, and a race that wants another hedge gets it."""

from __future__ import annotations

import math
import threading

import pytest

from resilient_session._pipeline.hedging.timer import Timer, Workers, real_monotonic
from tests.threads import run_together

WAIT = 10.0  # seconds a test waits for a thread before it fails: never reached when it works


def test_workers_run_every_job_on_at_most_their_threads():
    """Ten jobs held at a gate on a pool of two: two threads start, and once the gate opens
    every job runs on them."""
    workers = Workers(most=2)
    gate = threading.Event()
    done = threading.Semaphore(0)
    names: set[str] = set()

    def job() -> None:
        assert gate.wait(WAIT)
        names.add(threading.current_thread().name)
        done.release()

    before = {thread.ident for thread in threading.enumerate()}
    for _ in range(10):
        workers.submit(job)
    started = [t for t in threading.enumerate() if t.ident not in before]
    gate.set()
    assert all(done.acquire(timeout=WAIT) for _ in range(10))
    assert (len(started), names) == (2, {"resilient-session-hedge"})


class _Race:
    """A race that records its launches and asks for *more* hedges after the first."""

    def __init__(self, more: int = 0) -> None:
        self.launches = 0
        self.more = more
        self.launched = threading.Event()

    def launch(self) -> float | None:
        self.launches += 1
        if self.launches > self.more:
            self.launched.set()
            return None
        return real_monotonic()


def test_the_timer_launches_a_due_race_and_never_a_cancelled_one():
    """A race cancelled before it falls due is never launched; one due after it is."""
    timer = Timer(Workers())
    cancelled, due = _Race(), _Race()
    now = real_monotonic()
    timer.schedule(cancelled, now + 0.02)
    timer.cancel(cancelled)
    timer.schedule(due, now + 0.04)
    assert due.launched.wait(WAIT)
    assert (cancelled.launches, due.launches) == (0, 1)


def test_a_race_that_wants_more_hedges_is_launched_again():
    """launch() returning the next instant schedules the race again: max_extra hedges."""
    timer = Timer(Workers())
    race = _Race(more=2)
    timer.schedule(race, real_monotonic())
    assert race.launched.wait(WAIT)
    assert race.launches == 3


def test_a_launch_that_raises_leaves_the_timer_serving():
    """A race whose launch raises goes unhedged; the next race is still launched."""
    timer = Timer(Workers())

    class Broken:
        def launch(self) -> float | None:
            raise RuntimeError("broken")

    later = _Race()
    now = real_monotonic()
    timer.schedule(Broken(), now)
    timer.schedule(later, now + 0.01)
    assert later.launched.wait(WAIT)


def test_a_late_timer_puts_overdue_races_back_once_before_it_launches_them():
    """The timer looks 30 ms after the instant it slept until: a race 30 ms overdue and one
    5 ms overdue are put back by as long, not launched; once due again they are launched even
    if the timer is late again; a timer on time launches what is due at once."""
    timer = Timer(Workers())
    early, late, on_time = _Race(), _Race(), _Race()
    timer._due.update({early: 1.000, late: 1.025})
    assert timer.take_due(now=1.030, late=0.030) == []
    assert timer._due == {early: pytest.approx(1.060), late: pytest.approx(1.035)}
    assert timer.take_due(now=1.040, late=0.010) == [late]
    assert timer.take_due(now=1.070, late=0.030) == [early]
    timer._due[on_time] = 1.100
    assert timer.take_due(now=1.100, late=0.0) == [on_time]
    assert (timer._due, timer._put_back) == ({}, set())


def test_a_race_cancelled_after_it_was_put_back_is_gone():
    """A race put back for the timer's lateness and then answered is never launched, and the
    timer's next look forgets it."""
    timer = Timer(Workers())
    race = _Race()
    timer._due[race] = 1.0
    assert timer.take_due(now=1.02, late=0.02) == []
    timer.cancel(race)
    assert timer.take_due(now=1.10, late=0.0) == []
    assert (timer._due, timer._put_back, race.launches) == ({}, set(), 0)


def test_while_races_come_the_timer_sleeps_until_the_earliest_within_their_lead():
    """Races given at a 300 ms lead (auto's delay at 64 callers): the timer sleeps until the
    earliest one, 250 ms off, where it looked every 10 ms before; with none left, a lead
    from now. A shorter lead among those given since its last look shortens the sleep, never
    under 10 ms; with no race given for a second it sleeps until one is."""
    timer = Timer(Workers())
    first, second = _Race(), _Race()
    timer._due.update({first: 10.25, second: 10.29})
    timer._lead, timer._scheduled_at = 0.3, 10.0
    assert timer.sleep_until(10.0) == 10.25
    timer.cancel(first)
    timer.cancel(second)
    assert timer.sleep_until(10.0) == pytest.approx(10.3)  # no race given since: the same lead
    timer._lead = 0.02
    assert timer.sleep_until(10.0) == pytest.approx(10.02)
    timer._lead = 0.001
    assert timer.sleep_until(10.0) == pytest.approx(10.01)
    timer._scheduled_at = 8.9
    assert timer.sleep_until(10.0) == math.inf


def test_a_race_given_while_the_thread_is_awake_takes_no_lock():
    """Each race given tells the timer its lead; while the thread is awake (it looks again
    before it sleeps) none wakes it, so none takes the lock."""
    timer = Timer(Workers())
    timer._wake_at = -math.inf  # awake
    now = real_monotonic()
    timer.schedule(_Race(), now + 0.3)
    timer.schedule(_Race(), now + 0.05)
    assert timer._lead == pytest.approx(0.05, abs=0.01)
    assert (timer._thread, len(timer._due)) == (None, 2)


def test_64_threads_scheduling_and_cancelling_at_once_lose_no_race():
    """64 threads each give a running timer 50 races due at once and 50 due in an hour that
    they cancel: every race due is launched exactly once, no cancelled one ever, and the
    timer is left holding nothing."""
    timer = Timer(Workers())
    due = [[_Race() for _ in range(50)] for _ in range(64)]
    cancelled = [[_Race() for _ in range(50)] for _ in range(64)]

    def give(index: int) -> None:
        for now, later in zip(due[index], cancelled[index], strict=True):
            timer.schedule(later, real_monotonic() + 3600)
            timer.schedule(now, real_monotonic())
            timer.cancel(later)

    run_together(64, give)
    assert all(race.launched.wait(WAIT) for races in due for race in races)
    assert {race.launches for races in due for race in races} == {1}
    assert {race.launches for races in cancelled for race in races} == {0}
    assert timer._due == {}
