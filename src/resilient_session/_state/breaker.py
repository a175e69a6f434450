"""The per-host circuit breaker: a small state machine guarded by its own lock."""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from resilient_session.clock import Clock
from resilient_session.config.policy import BreakerPolicy

from .counter import Tally

# An opening after the first lasts up to this much longer, at random, so a fleet of clients
# that tripped together does not probe a recovering host in lockstep.
_REOPEN_JITTER = 0.2


class BreakerState(str, Enum):
    """The three states, spelled as events carry them."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class TryResult(Enum):
    """What a try means to the breaker."""

    SUCCESS = "success"
    FAILURE = "failure"
    # Neither proof of health nor of sickness: a TLS or URL error, a try refused locally.
    # A try cut short by the deadline is a failure: a hanging host is what a breaker is for.
    NEUTRAL = "neutral"


_SUCCESS = TryResult.SUCCESS
_STILL_CLOSED: tuple[BreakerState, None] = (BreakerState.CLOSED, None)


@dataclass(frozen=True, slots=True)
class Transition:
    """A state change, returned from under the lock so it is logged after release.

    *seq* numbers this breaker's changes 1, 2, 3, ... in the order they happened: it is taken
    under the lock, while events are logged after it, where threads may overtake one another.
    """

    host: str
    from_state: BreakerState
    to_state: BreakerState
    seq: int
    # The host's route whose breaker this is (``hosts:`` ... ``routes:``); None for the host's.
    route: str | None = None


@dataclass(frozen=True, slots=True)
class Permit:
    """Admission of one try: the epoch it was admitted in, and whether it is a probe."""

    epoch: int
    probe: bool


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """A consistent read of a breaker's state and counters."""

    state: BreakerState
    tries: int
    failures: int
    rejected: int
    refused_inside: int
    openings: int
    open_for: float


class CircuitBreaker:
    """CLOSED → OPEN after consecutive failures (or a failure rate), HALF_OPEN probes, back.

    Every method takes the lock once, changes only this breaker's fields, and returns any
    transition as a value: nothing slow or re-entrant ever runs under the lock.
    """

    def __init__(
        self,
        host: str,
        policy: BreakerPolicy,
        clock: Clock,
        rng: random.Random,
        route: str | None = None,
    ) -> None:
        self.host = host
        # The route of the host this breaker guards alone; None when it guards the host.
        self.route = route
        self._policy = policy
        self._clock = clock
        self._rng = rng
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        # Bumped on every state change; a result admitted in an older epoch is stale.
        self._epoch = 0
        # Every try admitted in one epoch outside HALF_OPEN gets this same permit.
        self._closed_permit = Permit(0, probe=False)
        # While CLOSED, what allow() answers, readable without the lock (None otherwise): a
        # try admitted just as another thread opens the breaker holds a permit of the old
        # epoch, and its result is dropped as stale, as if admitted a moment before the change.
        # hot path: closed-admission
        self.closed_admission: tuple[Permit, None] | None = (self._closed_permit, None)
        # Called before each try is admitted, when set: a fleet's breaker takes in an opening
        # already on its way to this worker (fleet/push.py). ``aheed`` is the same for a try
        # made on an event loop, awaited there instead of blocking it (fleet/inbox.py). Set
        # on the instance, None or not: read before each try, where an attribute the instance
        # holds reads faster than a default found on the class.
        # hot path: closed-admission
        self.heed: Callable[[], None] | None = None
        self.aheed: Callable[[], Awaitable[None]] | None = None
        self._consecutive_failures = 0
        self._window: deque[bool] | None = (
            deque(maxlen=policy.window) if policy.window is not None else None
        )
        self._window_failures = 0
        self._openings = 0
        self._open_until = 0.0
        self._probes = 0
        # Counted without the lock on the happy path (counter.py).
        self._tries = Tally()
        self._failures = 0
        self._rejected = 0
        self._refused_inside = 0

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    def allow(self) -> tuple[Permit | None, Transition | None]:
        """Admit a try (a permit) or refuse it (None); OPEN turns HALF_OPEN once its time is up."""
        admission = self.closed_admission
        if admission is not None:
            return admission
        with self._lock:
            transition = None
            if self._state is BreakerState.OPEN:
                if self._clock.monotonic() < self._open_until:
                    self._rejected += 1
                    return None, None
                transition = self._move(BreakerState.HALF_OPEN)
            if self._state is BreakerState.HALF_OPEN:
                if self._probes >= self._policy.half_open_max_calls:
                    self._rejected += 1
                    return None, transition
                self._probes += 1
                return Permit(self._epoch, probe=True), transition
            return self._closed_permit, transition

    def record(
        self, permit: Permit, result: TryResult, sent: bool = True, counted: bool = True
    ) -> tuple[BreakerState, Transition | None]:
        """Count the result of an admitted try; returns the state after it.

        A try admitted here but refused by a guard inside, never sent (*sent* false), is no
        try: it only gives back its probe slot, and is counted in ``refused_inside`` unless
        *counted* is false (a guard that keeps its own count of its refusals).
        """
        if (
            result is _SUCCESS
            and permit is self._closed_permit
            and not self._consecutive_failures
            and self._window is None
        ):
            # A success in the current closed epoch, with no run of failures to end, changes
            # nothing but the count. A change racing these reads lands after this try, as one
            # a moment later would.
            # hot path: lock-free-counts
            next(self._tries.ticks)
            return _STILL_CLOSED
        # hot path: explicit-lock
        lock = self._lock
        lock.acquire()
        try:
            if result is _SUCCESS and permit is self._closed_permit and self._window is None:
                # A success in the current CLOSED epoch only ends the run.
                next(self._tries.ticks)
                self._consecutive_failures = 0
                return _STILL_CLOSED
            if sent:
                next(self._tries.ticks)
            elif counted:
                self._refused_inside += 1
            if result is TryResult.FAILURE:
                self._failures += 1
            if permit.epoch != self._epoch:
                # The breaker changed state while this try was in flight; its result speaks
                # for a state that no longer holds.
                return self._state, None
            if permit.probe:
                self._probes -= 1
                transition = self._after_probe(result)
            else:
                transition = self._after_closed_try(result)
            return self._state, transition
        finally:
            lock.release()

    def _after_probe(self, result: TryResult) -> Transition | None:
        if result is TryResult.SUCCESS:
            self._openings = 0
            return self._move(BreakerState.CLOSED)
        if result is TryResult.FAILURE:
            return self._open()
        return None

    def _after_closed_try(self, result: TryResult) -> Transition | None:
        if result is TryResult.NEUTRAL:
            return None
        failed = result is TryResult.FAILURE
        self._consecutive_failures = self._consecutive_failures + 1 if failed else 0
        if self._consecutive_failures >= self._policy.failure_threshold:
            return self._open()
        if self._window is not None and self._rate_exceeded(failed):
            return self._open()
        return None

    def _rate_exceeded(self, failed: bool) -> bool:
        window = self._window
        assert window is not None  # noqa: S101 - only called when a window is configured
        if len(window) == window.maxlen and window[0]:
            self._window_failures -= 1
        window.append(failed)
        self._window_failures += failed
        calls = len(window)
        return (
            calls >= self._policy.minimum_calls
            and self._window_failures / calls >= self._policy.failure_rate_threshold
        )

    def _open(self) -> Transition:
        self._openings += 1
        self._open_until = self._clock.monotonic() + self._open_duration(self._openings)
        return self._move(BreakerState.OPEN)

    def _open_duration(self, opening: int) -> float:
        # Opening 1 lasts exactly recovery_timeout, so a blip heals fast; later ones double,
        # with jitter, so a long outage is probed rarely and not by the whole fleet at once.
        policy = self._policy
        if opening == 1:
            return policy.recovery_timeout
        doubled = policy.recovery_timeout * 2.0 ** min(opening - 2, 62)
        base = min(policy.recovery_timeout_max, doubled)
        jittered = base * (1.0 + self._rng.uniform(0.0, _REOPEN_JITTER))
        return min(policy.recovery_timeout_max, jittered)

    def _move(self, to_state: BreakerState) -> Transition:
        self._epoch += 1
        transition = Transition(self.host, self._state, to_state, self._epoch, self.route)
        self._state = to_state
        self._closed_permit = Permit(self._epoch, probe=False)
        self.closed_admission = (
            (self._closed_permit, None) if to_state is BreakerState.CLOSED else None
        )
        self._probes = 0
        self._consecutive_failures = 0
        if self._window is not None:
            self._window.clear()
            self._window_failures = 0
        return transition

    def after_fork(self) -> None:
        """In a forked child, where only the forking thread runs: a fresh lock, and no probe
        in flight. One a parent's thread held at the fork is never given back there: the lock
        would hang the child's first call, the probe slot refuse every call of a half-open
        breaker for good. No try forks from under the lock or while it holds a probe."""
        self._lock = threading.Lock()
        self._probes = 0

    def snapshot(self) -> BreakerSnapshot:
        with self._lock:
            open_for = 0.0
            if self._state is BreakerState.OPEN:
                open_for = max(0.0, self._open_until - self._clock.monotonic())
            return BreakerSnapshot(
                self._state,
                self._tries.value(),
                self._failures,
                self._rejected,
                self._refused_inside,
                self._openings,
                open_for,
            )
