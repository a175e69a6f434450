"""The hedging call stage: a call it may hedge runs its first try as a race on the racing
chains, then goes on from the race's last try number on the plain per-try chain; any other
call runs as it would without hedging.

A call may be hedged when its host enables ``hedging``, a try number is left for a hedge
(``retry.max_attempts`` >= 2), it is idempotent (POST and PATCH only with an
``Idempotency-Key``), its body can be sent again, the caller does not stream the response
(``stream=True``: the body is the caller's to read, after the try), and the request being
served will not be retried by its own caller (one layer retries, the outermost).
"""

from __future__ import annotations

import contextvars

from resilient_session._pipeline.attempt import Call, Outcome, first_attempt
from resilient_session._pipeline.call_stage import Run
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.intent import caller_retries
from resilient_session._state.hedge import HedgeState

from .race import RACE, Race
from .racing_stages import racing_chain


class HedgeCalls:
    """Runs a call that may be hedged as a race, any other call on *run*.

    Args:
        first: the racing chain the first try of a hedged call goes through.
        hedge: the racing chain each of its hedges goes through.
    """

    __slots__ = ("_first", "_hedge")

    def __init__(self, first: Next, hedge: Next) -> None:
        self._first = first
        self._hedge = hedge

    @classmethod
    def around(cls, transport: Next, *, hooks: bool, senders: bool) -> HedgeCalls:
        """The stage whose racing chains send on *transport*, telling the try hooks if
        *hooks*, and the send hooks if *senders*."""
        return cls(
            racing_chain(transport, hedge=False, hooks=hooks, senders=senders),
            racing_chain(transport, hedge=True, hooks=hooks, senders=senders),
        )

    def __call__(self, call: Call, run: Run, /) -> Outcome:
        hedge = hedgeable(call)
        if hedge is None:
            return run(call)
        # Copied before the first try sets anything in it: each hedge starts from the caller's.
        race = Race(call, hedge, self._hedge, contextvars.copy_context())
        first = first_attempt(call)
        token = RACE.set(race)
        try:
            outcome = self._first(first)
        finally:
            RACE.reset(token)
            race.close()
        if race.winner is not None and race.winner > 1:  # a hedge answered first
            outcome = race.result()
        # The race gave out try numbers up to race.launched: the retry after it comes next,
        # waited for and looped by drive's resume, as after any try.
        last = first if race.launched == 1 else first.replace(number=race.launched)
        return run.resume(last, outcome)


def hedgeable(call: Call) -> HedgeState | None:
    """The host's hedging state when *call* may be hedged (the module's docstring says
    when); None when it runs as it would without hedging."""
    hedge = call.state.hedge
    if (
        hedge is None
        or not call.policy.hedging.enabled  # switched off for this call (resilience=)
        or call.stream
        or not call.idempotent
        or not call.replayable
        or call.policy.retry.max_attempts < 2
        or caller_retries()
    ):
        return None
    return hedge
