"""One hedged call's race: the tries it sent, the one that answered first, and cutting the rest.

A race starts with the call's first try, sent on the caller's thread. Once that try is on the
wire the timer (``timer.py``) holds the race until the host's delay has passed; each hedge
it launches then runs on a worker, in a copy of the caller's context, through the same
stages. The first try to end, whatever it ended with, wins: every other try still out is cut
(the watchdog fires its watch, so its socket is shut down and its connection never pooled)
and comes back cancelled. The caller's thread returns the winner's outcome, waiting for a
hedge that won to finish its way back up through the stages.

Every method takes the race's lock for its own fields only and does the rest (cutting,
the budget, the host's counts, the timer) after releasing it.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Final

from resilient_session._pipeline.attempt import (
    Attempt,
    Call,
    Decision,
    Outcome,
    Reason,
    Verdict,
)
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.wire import RaceBound
from resilient_session._state.hedge import HedgeState

from .timer import TIMER, real_monotonic

# The race the try running in this context belongs to: set around the first try by the
# hedged chain and around each hedge by its worker; read only by the racing stages.
RACE: Final[contextvars.ContextVar[Race | None]] = contextvars.ContextVar(
    "resilient_session_race", default=None
)

_CANCELLED: Final = Decision(Verdict.CANCELLED, Reason.HEDGE_LOST)
_MAX_ATTEMPTS: Final = Decision(Verdict.GIVE_UP, Reason.MAX_ATTEMPTS)
_HEDGE_LOST: Final = Reason.HEDGE_LOST
_RETRY: Final = Verdict.RETRY
# How long the caller waits for a hedge that answered first to come back up its stages: only
# the stages and the try hooks run by then, no network.
_RESULT_WAIT: Final = 60.0

_new_tuple = tuple.__new__


class Race:
    """The tries of one hedged call, sent on the caller's thread and on workers.

    Args:
        call: the call raced.
        hedge: its host's hedging state: the delay, the latencies, the counts.
        chain: the stages each hedge goes through.
        context: the caller's context, copied before the first try: each hedge runs in a copy.
    """

    __slots__ = (
        "_chain",
        "_context",
        "_delay",
        "_done",
        "_lock",
        "_lost",
        "_result",
        "_sent",
        "_wire",
        "call",
        "hedge",
        "launched",
        "winner",
    )

    def __init__(
        self, call: Call, hedge: HedgeState, chain: Next, context: contextvars.Context
    ) -> None:
        self.call = call
        self.hedge = hedge
        self._delay = hedge.delay_for(call.policy.hedging)
        self._chain = chain
        self._context = context
        self._lock = threading.Lock()
        # Made only when the caller has to wait for a hedge that won: most races never do.
        self._done: threading.Condition | None = None
        self._wire: dict[int, RaceBound] = {}  # tries on the wire, by number: the bound a cut ends
        self._sent: set[int] = set()
        self._lost: set[int] = set()
        # The highest try number given out: the first try and each hedge launched.
        self.launched = 1
        # The number of the try that ended first; 0 when the race ended with none.
        self.winner: int | None = None
        self._result: tuple[Outcome | None, BaseException | None] | None = None

    # --- on the thread of the try, from the racing stages -----------------------------------

    def sending(self, number: int, bound: RaceBound) -> bool:
        """Try *number*, past every guard, is about to go out under *bound*; False when
        another try has already answered, and it must not."""
        with self._lock:
            lost = self.winner is not None
            if lost:
                self._lost.add(number)
            else:
                self._wire[number] = bound
                self._sent.add(number)
        if number > 1:
            self.hedge.count(hedges=1, cancelled=int(lost))
        elif not lost and self._delay is not None:
            TIMER.schedule(self, real_monotonic() + self._delay)
        return not lost

    def answered(self, number: int, seconds: float, fired: bool = False) -> bool:
        """Try *number* ended after *seconds* on the wire, cut short if its bound *fired*;
        True when it was the first, in which case every other try still out is cut."""
        with self._lock:
            self._wire.pop(number, None)
            won = self.winner is None
            if won:
                self.winner = number
                cut = list(self._wire.values())
                self._wire.clear()
            else:
                self._lost.add(number)
                cut = []
        if number == 1:
            TIMER.cancel(self)
        for bound in cut:
            bound.cut()
        if number == 1:
            # Only the first try teaches the delay; a hedge out against it as it answered
            # is on the wire still, about to be cut.
            self.hedge.learn(seconds, self._delay, raced=bool(cut), cut=fired or not won)
        if number > 1 and won:
            self.hedge.count(wins=1)
        elif not won:
            self.hedge.count(cancelled=1)
        return won

    def settled(self, attempt: Attempt, outcome: Outcome) -> Outcome:
        """*outcome* as the try's event tells it: a try that lost is cancelled; a retry the
        race has no try number left for gives up instead, its budget token given back."""
        number = attempt.number
        # Without the lock: this try's own entries were written on this thread, before.
        if number in self._lost:
            refused = None if number in self._sent else _HEDGE_LOST
            return _new_tuple(
                Outcome, (None, outcome.error, _CANCELLED, refused, outcome.breaker, None)
            )
        if (
            outcome.decision.verdict is _RETRY
            and self.launched >= self.call.policy.retry.max_attempts
        ):
            self.call.state.bucket.refund()
            return outcome.with_decision(_MAX_ATTEMPTS)
        return outcome

    def cancelled(self, attempt: Attempt) -> Outcome:
        """The outcome of *attempt*, which lost: no try for any guard."""
        call = self.call
        why = f"try {self.winner} answered first" if self.winner else "the call ended"
        message = f"try {attempt.number} of {call.method} {call.state.key} was cancelled: {why}"
        # About the try's own request, with no earlier try to fall back on (``refuse`` gives
        # the last one that reached the upstream): a try that lost never answers the caller
        # (``settled``).
        error = call.wire.refusal(_HEDGE_LOST, message, attempt.request)
        return Outcome(error=error, refused=_HEDGE_LOST)

    # --- on the timer's thread and the workers ------------------------------------------------

    def launch(self) -> float | None:
        """Send the next hedge if the race is still open, its first try's request has been
        out for the delay with no answer (as far as its socket tells: ``_transport/
        arrival.py``), a try number is left, the deadline has not passed and the budget pays a
        token; when to look again, if ever."""
        call = self.call
        policy = call.policy
        most = min(policy.retry.max_attempts, policy.hedging.max_extra + 1)
        with self._lock:
            number = self.launched + 1
            if self.winner is not None or number > most:
                return None
            first = self._wire.get(1)
        if first is not None and self._delay is not None:
            # A try whose answer is in, or whose request left late, is waiting for its own
            # thread: a hedge would only add load to a process already behind.
            wait = first.hedge_wait(self._delay)
            if wait > 0:
                return real_monotonic() + wait
        deadline_at = call.deadline_at
        if deadline_at is not None and call.runtime.clock.monotonic() >= deadline_at:
            return None
        bucket = call.state.bucket
        if not bucket.try_withdraw():
            return None  # no token, no hedge
        with self._lock:
            taken = self.winner is None
            if taken:
                self.launched = number
        if not taken:
            bucket.refund()
            return None
        TIMER.workers.submit(lambda: self._hedge(number))
        if number < most and self._delay is not None:
            return real_monotonic() + self._delay
        return None

    def _hedge(self, number: int) -> None:
        """Send hedge *number* through the stages, on a worker, in a copy of the caller's
        context; hand its outcome to the caller when it won."""
        call = self.call
        attempt = Attempt(call, number, call.request, call.timeout)
        context = self._context.copy()
        outcome: Outcome | None = None
        error: BaseException | None = None
        try:
            context.run(RACE.set, self)
            outcome = context.run(self._chain, attempt)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller if this try won
            error = exc
        with self._lock:
            sent = number in self._sent
            if self.winner == number:
                self._result = (outcome, error)
                if self._done is not None:
                    self._done.notify_all()
        if not sent:
            # Refused by a guard, or too late to leave: no hedge happened, so no token spent.
            call.state.bucket.refund()

    # --- on the caller's thread ---------------------------------------------------------------

    def result(self) -> Outcome:
        """The outcome of the hedge that won, once it is back up its stages; raises what
        they raised."""
        with self._lock:
            if self._done is None:
                self._done = threading.Condition(self._lock)
            if not self._done.wait_for(lambda: self._result is not None, _RESULT_WAIT):
                raise RuntimeError(f"hedge {self.winner} did not come back within {_RESULT_WAIT} s")
            assert self._result is not None  # noqa: S101 - the wait just saw it set
            outcome, error = self._result
        if error is not None:
            raise error
        assert outcome is not None  # noqa: S101 - a hedge without an error has an outcome
        return outcome

    def close(self) -> None:
        """End the race: launch nothing more, and cut whatever is still out (only a first
        try that raised leaves anything). The timer let go of it when the first try ended; a
        later hedge it still holds finds the race over and is not sent."""
        if self.winner is not None and not self._wire:
            # Ended, and nothing out: once a try has won, no try joins the wire and each one
            # on it only leaves, so the lock has nothing to guard (most races end here).
            return
        with self._lock:
            if self.winner is None:
                self.winner = 0
            cut = list(self._wire.values())
            self._wire.clear()
        for bound in cut:
            bound.cut()
