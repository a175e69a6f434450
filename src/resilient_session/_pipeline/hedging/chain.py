"""The hedged chain: what ``drive`` runs when a host of the config hedges, racing the first try
of each call that may be hedged and passing every other try to the plain chain.

A call may be hedged when its host enables ``hedging``, a try number is left for a hedge
(``retry.max_attempts`` >= 2), it is idempotent (POST and PATCH only with an
``Idempotency-Key``), its body can be sent again, the caller does not stream the response
(``stream=True``: the body is the caller's to read, after the try), and the request being
served will not be retried by its own caller (one layer retries, the outermost).
"""

from __future__ import annotations

import contextvars

from resilient_session._pipeline.attempt import Attempt, Outcome, Verdict
from resilient_session._pipeline.drive import Next, drive
from resilient_session._pipeline.intent import caller_retries

from .race import RACE, Race

_RETRY = Verdict.RETRY


class HedgedChain:
    """Runs a call that may be hedged as a race, any other try on *plain*.

    Args:
        plain: the standard chain.
        first: the racing chain the first try of a hedged call goes through.
        hedge: the racing chain each of its hedges goes through.
    """

    __slots__ = ("_first", "_hedge", "_plain")

    def __init__(self, plain: Next, first: Next, hedge: Next) -> None:
        self._plain = plain
        self._first = first
        self._hedge = hedge

    def __call__(self, attempt: Attempt) -> Outcome:
        call = attempt.call
        hedge = call.state.hedge
        if (
            hedge is None
            or attempt.number != 1
            or call.stream
            or not call.idempotent
            or not call.replayable
            or call.state.policy.retry.max_attempts < 2
            or caller_retries()
        ):
            return self._plain(attempt)
        # Copied before the first try sets anything in it: each hedge starts from the caller's.
        race = Race(call, hedge, self._hedge, contextvars.copy_context())
        token = RACE.set(race)
        try:
            outcome = self._first(attempt)
        finally:
            RACE.reset(token)
            race.close()
        if race.winner is not None and race.winner > 1:  # a hedge answered first
            outcome = race.result()
        if outcome.decision.verdict is not _RETRY or race.launched == 1:
            return outcome
        # The race gave out try numbers up to race.launched: the retry after it comes next.
        # drive() is still the one that waits and loops, from the race's outcome on.
        last = Attempt(call, race.launched, call.request, call.timeout)
        return drive(_Resumed(outcome, last, self._plain), last)


class _Resumed:
    """A handler that answers *last* with the race's *outcome*, then sends on *plain*."""

    __slots__ = ("_last", "_outcome", "_plain")

    def __init__(self, outcome: Outcome, last: Attempt, plain: Next) -> None:
        self._outcome = outcome
        self._last = last
        self._plain = plain

    def __call__(self, attempt: Attempt) -> Outcome:
        if attempt is self._last:
            return self._outcome
        return self._plain(attempt)
