"""The breaker a fleet shares: local state that batches its failures and follows the fleet's.

The fleet guards (this, ``fleet/budget`` and ``fleet/throttle``) are the memory guards plus two
methods for the sync thread: ``exchange()`` takes what changed here since the last exchange,
``adopt()`` takes in what the whole fleet holds. Admission and counting stay local and under
the guard's own lock, so a call never waits on the shared store, and with the store gone each
guard simply goes on as the memory one. Nothing here knows where the fleet's state is kept.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from resilient_session._state.breaker import (
    BreakerState,
    CircuitBreaker,
    Permit,
    Transition,
    TryResult,
)
from resilient_session.clock import Clock
from resilient_session.config.policy import BreakerPolicy

# A push is followed only within this many generations past the one last read from the fleet:
# about as many changes of the host's breaker as a worker may miss between two reads of it
# (each opening and each closing is one). A push further ahead is not the fleet's, or follows
# a rebuilt hash (whose generation restarts at the server's time); the next read tells.
PUSH_AHEAD: Final = 64

_FAILURE = TryResult.FAILURE
_SUCCESS = TryResult.SUCCESS
_CLOSED = BreakerState.CLOSED
_OPEN = BreakerState.OPEN
_HALF_OPEN = BreakerState.HALF_OPEN


class StateCode(IntEnum):
    """A breaker state as the shared store keeps it."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


class Change(IntEnum):
    """The last state change this worker's breaker made by itself since the last exchange."""

    NONE = 0
    OPENED = 1
    CLOSED = 2


_CODES = {
    BreakerState.CLOSED: StateCode.CLOSED,
    BreakerState.OPEN: StateCode.OPEN,
    BreakerState.HALF_OPEN: StateCode.HALF_OPEN,
}


@dataclass(frozen=True, slots=True)
class BreakerReport:
    """What a worker's breaker tells the fleet at one exchange."""

    state: StateCode
    # Milliseconds an open breaker stays open here; what a fresh shared state starts from.
    open_for_ms: int
    # The fleet generation this breaker last adopted; a change made against an older one lost
    # a race with another worker's and is dropped by the store.
    generation: int
    # Consecutive failures at the end of the batch, and when the first of them came
    # (this clock's monotonic seconds; 0 without a run).
    failure_run: int
    run_started_at: float
    # Whether the batch holds a success, and when the last run of successes began: no later
    # than its last success, so a failure the fleet counted after it is never taken as older.
    success_seen: bool
    success_at: float
    change: Change
    # When the batch was taken: the times above are sent as ages from it, as the workers'
    # clocks need not agree.
    taken_at: float

    @property
    def run_age_ms(self) -> int:
        """Milliseconds from the first trailing failure to the exchange; 0 without a run."""
        return round((self.taken_at - self.run_started_at) * 1000) if self.failure_run else 0

    @property
    def success_age_ms(self) -> int:
        """Milliseconds from the last run of successes' start to the exchange; -1 without."""
        return round((self.taken_at - self.success_at) * 1000) if self.success_seen else -1


class FleetBreaker(CircuitBreaker):
    """A circuit breaker whose failures count fleet-wide and whose openings every worker
    follows.

    The fleet's run is the failures any worker saw after the latest success any worker saw,
    in time (docs/fleet.md): each batch carries its trailing failures with the time the first
    of them came, and the time of its last success. A failure while closed wakes the sync
    thread (*wake*): it may be the one that opens the breaker for the fleet. Successes on a
    healthy host only note the time the first of them came.
    """

    def __init__(
        self,
        host: str,
        policy: BreakerPolicy,
        clock: Clock,
        rng: random.Random,
        wake: Callable[[], None],
        hurry: Callable[[], None] | None = None,
        heed: Callable[[], None] | None = None,
        route: str | None = None,
        *,
        aheed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(host, policy, clock, rng, route)
        self.heed = heed
        self.aheed = aheed
        self._wake = wake
        # What an opening made here calls instead: the fleet hears of it without the gap
        # that keeps a host failing at random from waking the sync thread on every failure.
        self._hurry = hurry if hurry is not None else wake
        # Its own lock, never held with the breaker's: the batch is not the state machine.
        self._batch_lock = threading.Lock()
        self._failure_run = 0
        self._run_started_at = 0.0
        self._success_seen = False
        self._success_at = 0.0
        self._change = Change.NONE
        self._generation = 0
        # The fleet's run of failures as of the last sync, these workers' included.
        self._fleet_failures = 0
        # The epoch at the last exchange: a state change since is not in the batch, and is
        # read under the breaker's lock, where a change and its epoch are made together.
        self._exchanged_epoch = 0
        # The generation at the last exchange: a pushed opening heard since is newer than a
        # reply to that batch may be.
        self._exchanged_generation = 0
        # The generation last read from the fleet (a sync's reply), and the newest one pushed
        # and followed: a push is followed within PUSH_AHEAD of the first, and only past the
        # second, so an opening published again is not followed again once a sync undid it.
        self._read_generation = 0
        self._pushed_generation = 0

    def _after_closed_try(self, result: TryResult) -> Transition | None:
        transition = super()._after_closed_try(result)
        # The fleet's run as last read plus this worker's failures since (this one included,
        # not yet in the batch) is a run that already happened: reaching the threshold opens
        # here at once rather than a round trip later, and the opening goes out to the fleet.
        # A success here since the last read came after every failure in that run, so it
        # ended it: the local run alone is what counts then, and the local rule has it.
        if (
            transition is None
            and result is _FAILURE
            and self._fleet_failures
            and not self._success_seen
            and self._fleet_failures + self._failure_run + 1 >= self._policy.failure_threshold
        ):
            return self._open()
        return transition

    def record(
        self, permit: Permit, result: TryResult, sent: bool = True, counted: bool = True
    ) -> tuple[BreakerState, Transition | None]:
        state, transition = super().record(permit, result, sent, counted)
        if transition is not None:
            if transition.to_state is not _HALF_OPEN:
                opened = transition.to_state is _OPEN
                with self._batch_lock:
                    self._change = Change.OPENED if opened else Change.CLOSED
                (self._hurry if opened else self._wake)()
        elif permit.probe or not sent or state is not _CLOSED:
            # A probe speaks through the change it makes; a stale result speaks for nothing.
            pass
        elif result is _FAILURE:
            with self._batch_lock:
                if not self._failure_run:
                    self._run_started_at = self._clock.monotonic()
                self._failure_run += 1
            self._wake()
        elif result is _SUCCESS and (self._failure_run or not self._success_seen):
            # Only the first success of a run of them reads the clock: a healthy host pays
            # for one per sync interval, not one per try.
            with self._batch_lock:
                self._failure_run = 0
                self._success_seen = True
                self._success_at = self._clock.monotonic()
        return state, transition

    def after_fork(self) -> None:
        super().after_fork()
        self._batch_lock = threading.Lock()

    def exchange(self) -> BreakerReport:
        """What changed here since the last exchange; the batch starts afresh."""
        with self._lock:
            state = self._state
            self._exchanged_epoch = self._epoch
            self._exchanged_generation = self._generation
            now = self._clock.monotonic()
            open_for = 0.0
            if state is _OPEN:
                open_for = max(0.0, self._open_until - now)
        with self._batch_lock:
            report = BreakerReport(
                state=_CODES[state],
                open_for_ms=round(open_for * 1000),
                generation=self._generation,
                failure_run=self._failure_run,
                run_started_at=self._run_started_at,
                success_seen=self._success_seen,
                success_at=self._success_at,
                change=self._change,
                taken_at=now,
            )
            self._failure_run = 0
            self._success_seen = False
            self._change = Change.NONE
        return report

    def adopt(
        self, state: StateCode, open_for: float, generation: int, failures: int = 0
    ) -> Transition | None:
        """Follow the fleet's breaker: *state*, open for *open_for* more seconds, as of
        *generation*, with a run of *failures*. Returns this breaker's transition, if it made
        one, to be logged."""
        with self._lock:
            heard = self._generation != self._exchanged_generation
            if heard and generation < self._generation:
                # A pushed opening came in after this reply's batch went out, and the reply
                # is older than it: the next sync reads the state again.
                return None
            self._fleet_failures = failures
            self._read_generation = generation
            transition, closed_here = self._take(state, open_for, generation)
        return self._settle(state, transition, closed_here)

    def hear(self, generation: int, open_for: float) -> tuple[bool, Transition | None]:
        """Follow an opening the fleet pushed: open for *open_for* more seconds, as of
        *generation*. Not when this breaker knows that generation or a newer one already,
        followed a push of it before, or last read the fleet more than ``PUSH_AHEAD``
        generations behind it. Returns whether it was followed, and this breaker's
        transition, if it made one, to be logged."""
        with self._lock:
            if (
                generation <= self._generation
                or generation <= self._pushed_generation
                or generation > self._read_generation + PUSH_AHEAD
            ):
                return False, None
            self._pushed_generation = generation
            self._fleet_failures = 0
            transition, closed_here = self._take(StateCode.OPEN, open_for, generation)
        return True, self._settle(StateCode.OPEN, transition, closed_here)

    def _take(
        self, state: StateCode, open_for: float, generation: int
    ) -> tuple[Transition | None, bool]:
        """Under the lock: the fleet's *state* taken in, and whether a closing this breaker
        made itself since its batch went out is overtaken by it."""
        if generation == self._generation:
            # Nothing new in the fleet; what this breaker did since is in its next batch.
            return None, False
        self._generation = generation
        # Not the batch's change field: a caller notes its change there only after the
        # breaker's lock is released, and the reply may come in between.
        moved = self._epoch != self._exchanged_epoch
        closed_here = moved and self._state is _CLOSED
        if moved and self._state is _OPEN:
            # This breaker opened after its batch went out, so the fleet's state does not
            # know it yet: the opening goes out with the next batch, against this
            # generation, rather than being undone by a state that predates it.
            if state is StateCode.OPEN:
                self._open_until = self._clock.monotonic() + open_for
            return None, False
        return self._follow(state, open_for), closed_here

    def _settle(
        self, state: StateCode, transition: Transition | None, closed_here: bool
    ) -> Transition | None:
        if closed_here and state is StateCode.OPEN:
            # A newer opening outweighs this breaker's probe: its closing is not sent.
            with self._batch_lock:
                if self._change is Change.CLOSED:
                    self._change = Change.NONE
        return transition

    def _follow(self, state: StateCode, open_for: float) -> Transition | None:
        now = self._clock.monotonic()
        if state is StateCode.CLOSED:
            if self._state is _CLOSED:
                return None
            self._openings = 0
            return self._move(_CLOSED)
        if self._state is _OPEN:
            self._open_until = now + open_for
            return None
        if self._state is _HALF_OPEN and open_for <= 0:
            # Probing already: the fleet's opening has run out here too.
            return None
        self._openings += 1
        transition = self._move(_OPEN)
        self._open_until = now + open_for
        return transition

    def unsend(self, report: BreakerReport) -> None:
        """Put back a batch whose sync failed, to go out with the next one.

        Failures followed here by a success since are dropped, as a success ends a run.
        """
        with self._batch_lock:
            if not self._success_seen:
                if report.failure_run:
                    self._run_started_at = report.run_started_at
                self._failure_run += report.failure_run
                self._success_seen = report.success_seen
                self._success_at = report.success_at
            if self._change is Change.NONE:
                self._change = report.change

    def isolate(self) -> None:
        """The fleet is out of reach: forget the batch, whose counts it will never see."""
        with self._lock:
            self._fleet_failures = 0
        with self._batch_lock:
            self._failure_run = 0
            self._success_seen = False
            self._change = Change.NONE

    # Set by the sync thread when the host goes idle: the next try wakes it.
    _dozing = False

    def doze(self, dozing: bool = True) -> None:
        """While dozing (no try here lately, so the host is no longer synced every interval),
        the next try goes through allow(), which wakes the sync thread as a failure does: a
        host called again after a quiet spell is read from the fleet at once. A closed
        breaker's lock-free admission is withdrawn meanwhile; the happy path never looks."""
        with self._lock:
            self._dozing = dozing
            if self._state is _CLOSED:
                self.closed_admission = None if dozing else (self._closed_permit, None)

    def allow(self) -> tuple[Permit | None, Transition | None]:
        admission = self.closed_admission
        if admission is not None:
            return admission
        if self._dozing:
            with self._lock:
                woke, self._dozing = self._dozing, False
                if self._state is _CLOSED:
                    self.closed_admission = (self._closed_permit, None)
            if woke:
                self._wake()
        return super().allow()
