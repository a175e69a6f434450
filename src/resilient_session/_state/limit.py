"""The per-host concurrency limit: at most ``limit`` tries in flight, the limit adapting (AIMD).

The rule is the loss-based one of Netflix's concurrency-limits (``AIMDLimit``) and Palantir
Dialogue: a try that comes back in time while the flight is near the limit adds one to it; a
try the host dropped (a timeout, a transport error, an overload status) multiplies it by
``backoff_ratio``; ``min`` and ``max`` bound it. Dialogue's "cautious" variant adds 1/limit
per success; one per success is Netflix's, and doubles the limit per round trip while the
flight fills it, as TCP's slow start does.

Growth needs answers, so a burst that arrives at once on a host that has not answered yet
would wait a round trip for them. Until the first answer, a try that finds the flight at the
limit raises it to ``initial_burst`` instead; the first answer then sets it on evidence: the
flight it came back from (if more than ``initial``) for a success, ``initial`` times
``backoff_ratio`` for a drop. A host that hangs from its first try thus gets ``initial_burst``
tries; one that hangs after answering gets the limit its answers earned (see
docs/configuration.md).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from resilient_session.clock import Clock, SystemClock
from resilient_session.config.policy import LimitPolicy

from .wakeup import TaskWakeup, wake_all


class Signal(Enum):
    """What a finished try says about the host's capacity."""

    # Answered in time: the limit may grow.
    SUCCESS = "success"
    # Timed out, failed in transport or said it is overloaded: the limit shrinks.
    DROP = "drop"
    # Says nothing about capacity: a 5xx other than overload, a caller's own deadline, a
    # configuration error, a try that raised. The slot is given back and the limit kept.
    IGNORE = "ignore"


_SUCCESS = Signal.SUCCESS
_DROP = Signal.DROP
_IGNORE = Signal.IGNORE

Waiter = Callable[[threading.Condition, float], object]
"""Blocks on the condition (its lock held) for at most the given seconds of the clock's time."""

AsyncWaiter = Callable[[TaskWakeup, float], Awaitable[object]]
"""Awaits, no lock held and the loop never blocked, until the wake-up is woken or the given
seconds of the clock's time have passed."""


@dataclass(frozen=True, slots=True)
class LimitSnapshot:
    """A consistent read of a limit and its counters."""

    limit: int
    in_flight: int
    limited: int


class ConcurrencyLimit:
    """At most ``limit`` tries in flight to one host; a try over it waits, then is refused.

    A free slot is a token in a list: a try takes one with ``pop()`` and gives it back with
    ``append()``, each one call into C that the GIL runs whole, so a try that finds a slot and
    gives it back as it was costs no lock. Tokens
    are made as the flight first needs them (``_unissued``), so the list is as long as the
    most tries ever in flight at once, not as the limit. The tokens out, free and unissued
    always number the limit plus those owed (taken back as they return, after the limit fell
    below the flight). Everything else happens under one lock: waiting,
    on a ``threading.Condition`` on it that a returned token or a grown limit wakes; adapting
    the limit; the burst. Nothing slow runs under the lock: waiting releases it.

    Threads and tasks share the slots: :meth:`acquire` blocks the calling thread,
    :meth:`aacquire` awaits on the task's event loop, and a slot either gives back, by
    :meth:`release` from a thread or a task, wakes a waiter of either kind (a task through its
    loop's thread-safe entry, ``wakeup.py``), so a sync session and an async client in one
    process hold one limit per host.
    """

    # A registry keeps up to max_hosts of these: slots, and the condition made on first wait.
    __slots__ = (
        "_burst",
        "_cap",
        "_clock",
        "_free",
        "_limit",
        "_limited",
        "_lock",
        "_owed",
        "_policy",
        "_slot_freed",
        "_task_waiter",
        "_tasks_waiting",
        "_unissued",
        "_waiter",
        "_waiting",
        "host",
    )

    def __init__(
        self,
        host: str,
        policy: LimitPolicy,
        clock: Clock,
        waiter: Waiter | None = None,
        task_waiter: AsyncWaiter | None = None,
    ) -> None:
        self.host = host
        self._policy = policy
        self._clock = clock
        self._waiter = waiter
        self._task_waiter = task_waiter
        self._lock = threading.Lock()
        self._slot_freed: threading.Condition | None = None
        # The wake-ups of the tasks waiting for a slot, oldest first (a dict as an ordered
        # set: a task that stops waiting takes its own out in one step); made on first use.
        self._tasks_waiting: dict[TaskWakeup, None] | None = None
        self._limit = float(policy.initial)
        # int(self._limit), kept beside it: the tokens it stands for.
        self._cap = policy.initial
        self._free: list[None] = []
        self._unissued = policy.initial
        self._owed = 0
        # What the limit rises to when a host that has not answered yet is sent more than
        # initial at once; 0 once it has answered, or when that would be no rise at all.
        burst = min(policy.max, policy.initial_burst)
        self._burst = burst if burst > policy.initial else 0
        self._waiting = 0
        self._limited = 0

    @property
    def limit(self) -> int:
        """The limit now, as a whole number of tries."""
        return self._cap

    def acquire(self, deadline_at: float | None) -> bool:
        """Take a slot (True), waiting up to ``max_wait`` and never past *deadline_at* (a
        ``clock.monotonic()`` instant) when none is free; False when none freed in time.

        A free slot costs one ``pop()``: no lock, no clock.
        """
        # hot path: limit-tokens
        try:
            self._free.pop()
        except IndexError:
            return self._acquire_when_full(deadline_at)
        return True

    def acquire_now(self) -> bool:
        """Take a free slot (True) if one is there; False, and nothing taken or waited for,
        when none is: ``acquire``'s first step, for a caller that then goes its long way."""
        # hot path: limit-tokens
        try:
            self._free.pop()
        except IndexError:
            return False
        return True

    def _acquire_when_full(self, deadline_at: float | None) -> bool:
        with self._lock:
            if self._take_or_burst():
                return True
            return self._wait_for_slot(deadline_at)

    def _take_or_burst(self) -> bool:
        """A slot now, the burst raising the limit for it if it may (the lock held)."""
        if self._take():
            return True
        if self._flight() < self._burst:
            # No answer yet, so no growth yet: a waiting try would wait a whole round
            # trip. The first answer puts the limit back on evidence (_end_burst).
            self._limit = float(self._burst)
            self._resize(self._burst)
            return self._take()
        return False

    def _take(self) -> bool:
        """A free token, or a new one while fewer than the limit were made (the lock held)."""
        try:
            self._free.pop()
        except IndexError:
            if not self._unissued:
                return False
            self._unissued -= 1
        return True

    def _flight(self) -> int:
        """Tries holding a slot: the tokens there are, less the free and unissued ones."""
        return self._cap + self._owed - len(self._free) - self._unissued

    def _resize(self, cap: int) -> None:
        """Make the limit *cap* tries (the lock held): tokens added, or taken back now from
        the free ones and, for the rest, as tries give theirs back."""
        change = cap - self._cap
        self._cap = cap
        if change > 0:
            repaid = min(change, self._owed)
            self._owed -= repaid
            self._unissued += change - repaid
        else:
            for _ in range(-change):
                if not self._take():
                    self._owed += 1

    def _wait_for_slot(self, deadline_at: float | None) -> bool:
        clock = self._clock
        wait_until = clock.monotonic() + self._policy.max_wait
        if deadline_at is not None and deadline_at < wait_until:
            wait_until = deadline_at
        slot_freed = self._slot_freed
        if slot_freed is None:
            slot_freed = self._slot_freed = threading.Condition(self._lock)
        wait = self._waiter if self._waiter is not None else waiter_for(clock)
        # Counted before each look: a token given back after a look that missed it is given
        # back by a try that then sees this wait, and wakes it under the lock.
        self._waiting += 1
        try:
            while True:
                # A newcomer may have taken the freed slot first (no queue is kept): then
                # this try waits again, for what is left of its time.
                if self._take():
                    return True
                remaining = wait_until - clock.monotonic()
                if remaining <= 0:
                    self._limited += 1
                    return False
                wait(slot_freed, remaining)
        finally:
            self._waiting -= 1

    async def aacquire(self, deadline_at: float | None) -> bool:
        """:meth:`acquire` for a task: the same slots, awaited without blocking the event
        loop (asyncio or trio) and without holding the lock across an ``await``.

        A free slot costs one ``pop()`` and no ``await``. A task cancelled while it waits
        takes no slot (and passes on to another waiter a wake-up it was handed); once this
        returns True the slot is the caller's, to give back with :meth:`release` in a
        ``finally``.
        """
        try:
            self._free.pop()
        except IndexError:
            return await self._aacquire_when_full(deadline_at)
        return True

    async def _aacquire_when_full(self, deadline_at: float | None) -> bool:
        clock = self._clock
        with self._lock:
            if self._take_or_burst():
                return True
            wait_until = clock.monotonic() + self._policy.max_wait
            if deadline_at is not None and deadline_at < wait_until:
                wait_until = deadline_at
            # Counted before the look, as a thread's wait is (see _wait_for_slot).
            self._waiting += 1
        wait = self._task_waiter if self._task_waiter is not None else task_waiter_for(clock)
        wakeup: TaskWakeup | None = None
        took = False
        try:
            while True:
                with self._lock:
                    if wakeup is not None and self._tasks_waiting is not None:
                        # Still there: the wait timed out, no wake-up was handed to it.
                        self._tasks_waiting.pop(wakeup, None)
                    if self._take():
                        took = True
                        return True
                    remaining = wait_until - clock.monotonic()
                    if remaining <= 0:
                        self._limited += 1
                        return False
                    # One wake-up per wait: an anyio Event is set once.
                    wakeup = TaskWakeup()
                    if self._tasks_waiting is None:
                        self._tasks_waiting = {}
                    self._tasks_waiting[wakeup] = None
                # No lock held here: the wait is the loop's, woken from any thread.
                await wait(wakeup, remaining)
        finally:
            with self._lock:
                self._waiting -= 1
                passed_on = None
                if wakeup is not None and not took:
                    waiting = self._tasks_waiting
                    if waiting is None or waiting.pop(wakeup, True) is True:
                        # Handed a wake-up it will not use (cancelled meanwhile): a slot it
                        # was woken for may be free, and another waiter gets the wake.
                        passed_on = self._wake()
            self._wake_tasks(passed_on)

    def release(self, signal: Signal) -> None:
        """Give back a slot taken by :meth:`acquire`, adapting the limit to *signal*."""
        free = self._free
        if not self._owed and (
            signal is _IGNORE
            or (
                signal is _SUCCESS
                and not self._burst
                # Not near the limit (see _adapt), or at max: a success changes nothing.
                and (
                    (self._cap - self._unissued - len(free)) * 2 < self._limit
                    or self._cap >= self._policy.max
                )
            )
        ):
            free.append(None)
            # Read after the token is back: a try that began to wait before it counted
            # itself first, so one of the two always sees the other.
            if self._waiting or self._owed:
                self._settle()
            return
        with self._lock:
            # This try's slot, still out: the flight it came back from, itself included.
            in_flight = self._flight()
            if self._owed:
                self._owed -= 1
            else:
                free.append(None)
            if self._burst and signal is not _IGNORE:
                self._end_burst(signal, in_flight)
            self._adapt(signal, in_flight)
            woken = self._wake()
        if woken is not None:
            self._wake_tasks(woken)

    def _adapt(self, signal: Signal, in_flight: int) -> None:
        if signal is _SUCCESS:
            # "Near the limit": at least half of it in flight, this try included. Below that
            # the limit is not what bounds the flight, and a success there proves nothing
            # about a higher one; growing anyway would let a quiet client's limit drift to
            # max, and a host that then starts hanging would take max tries. So the limit
            # stays within twice the flight it has seen succeed.
            if in_flight * 2 >= self._limit and self._cap < self._policy.max:
                self._limit = min(self._policy.max, self._limit + 1.0)
                self._resize(int(self._limit))
        elif signal is _DROP:
            policy = self._policy
            self._limit = max(policy.min, self._limit * policy.backoff_ratio)
            self._resize(int(self._limit))

    def _settle(self) -> None:
        with self._lock:
            # Tokens owed are taken back from the free ones first.
            while self._owed and self._take():
                self._owed -= 1
            woken = self._wake()
        if woken is not None:
            self._wake_tasks(woken)

    def _wake(self) -> list[TaskWakeup] | None:
        """Under the lock: wake as many waiting threads as slots are free, and take as many
        waiting tasks' wake-ups out, to be woken once the lock is released (a wake-up is a
        write to another loop's socket: nothing of the kind runs under the lock)."""
        if not self._waiting:
            return None
        free = len(self._free) + self._unissued
        if free <= 0:
            return None
        if self._slot_freed is not None:
            self._slot_freed.notify(free)
        waiting = self._tasks_waiting
        if not waiting:
            return None
        woken = []
        for wakeup in waiting:
            woken.append(wakeup)
            if len(woken) == free:
                break
        for wakeup in woken:
            del waiting[wakeup]
        return woken

    def _wake_tasks(self, woken: list[TaskWakeup] | None) -> None:
        """Wake *woken* (the lock released); a wake-up whose loop had closed went to nobody,
        so the free slots are offered again to whoever waits."""
        if not wake_all(woken):
            self._settle()

    def _end_burst(self, signal: Signal, in_flight: int) -> None:
        """The host's first answer (the lock held): the limit it came back under replaces
        the burst, which no answer had vouched for. A success shows the host answering with
        *in_flight* tries out, so the limit keeps that much (from there the rule in
        :meth:`_adapt` adds one); a drop shows nothing held, so the burst counts for none
        and the limit falls from ``initial``."""
        self._burst = 0
        initial = self._policy.initial
        self._limit = float(in_flight if signal is _SUCCESS and in_flight > initial else initial)
        self._resize(int(self._limit))

    def after_fork(self) -> None:
        """In a forked child, where only the forking thread runs: a fresh lock, every slot
        free and no try waiting. The tries of a parent's threads never end there, so their
        slots would never come back, and at the limit the child would refuse every call to
        the host. No try forks while it holds a slot. The limit itself is kept."""
        self._lock = threading.Lock()
        self._slot_freed = None
        self._tasks_waiting = None
        self._free = []
        self._unissued = self._cap
        self._owed = 0
        self._waiting = 0

    def snapshot(self) -> LimitSnapshot:
        with self._lock:
            return LimitSnapshot(self._cap, self._flight(), self._limited)


def waiter_for(clock: Clock) -> Waiter:
    """How a try waits for a slot on *clock*: on the condition in real time for the system
    clock; otherwise by sleeping on *clock* itself, lock released, so a test's fake clock
    moves by exactly the wait and no real time passes."""
    if isinstance(clock, SystemClock):
        return _wait_in_real_time

    def sleep_on_clock(condition: threading.Condition, seconds: float) -> None:
        condition.release()
        try:
            clock.sleep(seconds)
        finally:
            condition.acquire()

    return sleep_on_clock


def _wait_in_real_time(condition: threading.Condition, seconds: float) -> None:
    condition.wait(seconds)


def task_waiter_for(clock: Clock) -> AsyncWaiter:
    """How a task waits for a slot on *clock*: until woken, in real time, for the system
    clock; otherwise by an awaited sleep on *clock* itself, so a test's fake clock moves by
    exactly the wait and no real time passes."""
    if isinstance(clock, SystemClock):
        return _await_in_real_time

    async def sleep_on_clock(wakeup: TaskWakeup, seconds: float) -> None:
        await clock.asleep(seconds)

    return sleep_on_clock


async def _await_in_real_time(wakeup: TaskWakeup, seconds: float) -> None:
    await wakeup.wait(seconds)
