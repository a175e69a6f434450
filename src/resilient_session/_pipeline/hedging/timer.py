"""Where hedges come from: one timer thread that finds the races due, and a few workers that
send their hedges.

A first try that is still out when its delay has passed needs a second try in flight while
the caller's thread waits on the first one's socket. Neither the caller nor a thread of its
own per call can do that cheaply, so one daemon thread keeps the instant each race is due
(a dict the callers write without a lock, as the watchdog keeps its watches) and hands each
due hedge to a small pool of daemon workers, at most ``MAX_WORKERS``, started as they are
first needed and kept.
Nothing here starts until a host that hedges sends its first try: with hedging off, no
thread, no lock and no frame of this module runs.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Final, Protocol

from resilient_session.clock import SYSTEM_CLOCK

# Hedges in flight at once in a process; one more waits for a worker to come free. Budget
# tokens bound hedges far below this in steady state; it caps a burst.
MAX_WORKERS: Final = 32

_INF: Final = float("inf")
_LONGEST_WAIT: Final = threading.TIMEOUT_MAX
# While races keep coming (one in the last _BUSY seconds), the timer never sleeps longer than
# the shortest lead (``at`` less the instant it was given) of the races given since it last
# looked, even with none due: a race due at its lead or later then needs no wake-up, and on a
# host that answers at once (its race ends microseconds after it began) the timer wakes a lead
# apart instead of once a call. Never less than _TICK, auto's floor, so a race on its delay
# never wakes it.
_TICK: Final = 0.010
_BUSY: Final = 1.0
# A timer thread that woke within this of the instant it slept until was on time.
_ON_TIME: Final = 0.001

# Races are timed on real time, whatever clock the stages run on, as the watchdog's watches.
real_monotonic = SYSTEM_CLOCK.monotonic

Job = Callable[[], None]


class Due(Protocol):
    """A race the timer holds: it launches its next hedge and says when the one after is due."""

    def launch(self) -> float | None: ...


class Workers:
    """Up to *most* daemon threads running jobs from one queue, started on demand."""

    def __init__(self, most: int = MAX_WORKERS) -> None:
        self._most = most
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._threads = 0
        self._idle = 0  # workers waiting on the queue, none of them promised a job yet
        self._backlog = 0  # jobs queued with no worker promised to them

    def submit(self, job: Job) -> None:
        """Run *job* on a worker: an idle one, a new one, or the first to come free."""
        with self._lock:
            start = False
            if self._idle:
                self._idle -= 1
            elif self._threads < self._most:
                self._threads += 1
                start = True
            else:
                self._backlog += 1
        self._queue.put(job)
        if start:
            threading.Thread(target=self._work, name="resilient-session-hedge", daemon=True).start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            try:
                job()  # a job catches what it raises: it owns its race's result
            except BaseException:
                with self._lock:
                    self._threads -= 1  # this worker ends: another may start in its place
                raise
            with self._lock:
                if self._backlog:
                    self._backlog -= 1  # takes a job no worker was promised
                else:
                    self._idle += 1


class Timer:
    """Launches each race's hedges when they fall due, on one daemon thread started by the
    first race it is given."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # Races and the instant each is due. schedule() and cancel() write it without the lock,
        # on every hedged call (item assignment and pop are atomic), as the watchdog keeps its
        # watches: 64 threads taking one lock twice a call spent more than the race itself.
        # The thread reads copies of it, and of a cancel() and the thread, whoever pops a race
        # owns its ending.
        self._due: dict[Due, float] = {}
        # Races the thread put back once already for the time it ran late (take_due); the
        # thread's own.
        self._put_back: set[Due] = set()
        # The instant the thread sleeps until: +inf before it starts, so that the first
        # schedule() takes the lock and starts it; -inf while it is awake, as it looks at the
        # races again before it sleeps, so no schedule() then takes the lock (at 64 callers a
        # thread awake but waiting for the interpreter had a tenth of the calls take it).
        self._wake_at = _INF
        # The same instant, kept for the thread's next look only: how late it woke.
        self._slept_until = _INF
        self._scheduled_at = -_INF  # when the latest race was given
        # The shortest lead of the races given since the thread last looked (written without
        # the lock: a lead lost to another thread's write only shortens a sleep or wakes the
        # thread once), and the one it sleeps by while races keep coming.
        self._lead = _INF
        self._cap = _TICK
        self._thread: threading.Thread | None = None

    def schedule(self, race: Due, at: float) -> None:
        """Launch *race*'s next hedge at *at* (``real_monotonic``), unless cancelled first."""
        self._due[race] = at
        now = self._scheduled_at = real_monotonic()
        if at - now < self._lead:
            self._lead = at - now
        # Read after the race is in the dict: a thread that went to sleep before this read
        # sleeps until the instant read here, and one that is awake will see the race.
        if at < self._wake_at:
            self._wake_early()

    def _wake_early(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="resilient-session-hedge-timer", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def cancel(self, race: Due) -> None:
        """Launch nothing more for *race*."""
        self._due.pop(race, None)

    def take_due(self, now: float, late: float) -> list[Due]:
        """The races due at *now*, taken off the timer, on its thread with its lock held; the
        thread looked *late* seconds after the instant it slept until.

        A timer that looks late ran in a process that was not running its threads (a busy
        interpreter, a starved CPU): a first try it finds overdue may have been answered
        meanwhile, its answer waiting for its own thread to run, and a stall would otherwise
        hedge every try in flight at once, spending the budget's tokens and more load on a
        process already behind. So a race that fell due while the timer was late is first
        put back by as long as it was overdue, once: a try still out after that is slow at
        the host, and is hedged even if the timer is late again.
        """
        due = self._due
        looked = due.copy()
        put_back = self._put_back
        put_back.intersection_update(looked)  # those cancelled since: forgotten
        ready: list[Due] = []
        for race, at in looked.items():
            if at > now:
                continue
            if late > _ON_TIME and race not in put_back:
                put_back.add(race)
                # A cancel() in between is undone: that race is launched later, finds its
                # call answered and sends nothing.
                due[race] = now + (now - at)
            elif due.pop(race, None) is not None:  # else cancelled in between
                put_back.discard(race)
                ready.append(race)
        return ready

    def sleep_until(self, now: float) -> float:
        """The instant the thread sleeps until, having found no race due at *now*: the
        earliest race's, and while races keep coming no later than the shortest lead of
        those given since its last look (``_TICK`` at least), or the one before when none
        was."""
        earliest = min(self._due.copy().values(), default=_INF)
        lead, self._lead = self._lead, _INF
        if lead < _INF:
            self._cap = max(_TICK, lead)
        if now - self._scheduled_at < _BUSY:
            earliest = min(earliest, now + self._cap)
        return earliest

    def _run(self) -> None:
        while True:
            with self._lock:
                self._wake_at = -_INF  # awake: it looks again before it sleeps
                now = real_monotonic()
                late, self._slept_until = now - self._slept_until, _INF
                ready = self.take_due(now, late)
                if not ready:
                    until = self.sleep_until(now)
                    # Published, then the races looked at once more: a schedule() before
                    # that look is in it, and one after reads this instant and, if its race
                    # is due sooner, waits on the lock to wake the thread. None is missed.
                    self._wake_at = until
                    if min(self._due.copy().values(), default=_INF) < until:
                        continue
                    self._slept_until = until
                    wait = None if until == _INF else min(until - now, _LONGEST_WAIT)
                    self._wake.wait(wait)
                    self._wake_at = -_INF
                    continue
            # Outside the lock: a launch takes the budget's lock and starts a worker.
            for race in ready:
                try:
                    again = race.launch()
                except Exception:  # noqa: BLE001 - that race goes unhedged; the timer serves on
                    again = None
                if again is not None:
                    self.schedule(race, again)

    def after_fork(self) -> None:
        """In a forked child: no timer thread, no worker, and locks no one holds."""
        self._reset()
        self.workers._reset()


TIMER: Final = Timer(Workers())

if hasattr(os, "register_at_fork"):
    # A child has neither thread, and a lock may have been held at the fork.
    os.register_at_fork(after_in_child=TIMER.after_fork)
