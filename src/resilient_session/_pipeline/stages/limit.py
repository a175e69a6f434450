"""The limit stage: a try takes one of the host's concurrency slots, or waits, or is refused."""

from __future__ import annotations

from resilient_session._pipeline.attempt import Attempt, Outcome, Reason
from resilient_session._pipeline.classify import meaning_of
from resilient_session._pipeline.drive import Next
from resilient_session._pipeline.refusal import refuse
from resilient_session._pipeline.wire import ErrorKind
from resilient_session._state.limit import Signal

_SUCCESS = Signal.SUCCESS
_DROP = Signal.DROP
_IGNORE = Signal.IGNORE


def limit_concurrency(attempt: Attempt, call_next: Next, /) -> Outcome:
    """Inside the breaker and the throttle, outside the deadline: a try waits for a slot before
    the deadline stage clamps its timeouts, so it gets what is left after the wait."""
    call = attempt.call
    limit = call.state.limit
    if limit is None:
        return call_next(attempt)
    deadline_at = call.deadline_at
    if not limit.acquire(deadline_at):
        return refuse(
            attempt,
            Reason.CONCURRENCY_LIMIT,
            f"concurrency limit for {limit.host} is full ({limit.limit} tries in flight) "
            "and no slot freed in time; the try was not sent",
        )
    # Read only for a call with a deadline: the one case where the try's length matters.
    started = call.runtime.clock.monotonic() if deadline_at is not None else 0.0
    signal = _IGNORE  # what a try that raised gives back: its slot, and nothing else
    try:
        outcome = call_next(attempt)
        response = outcome.response
        # hot path: happy
        if response is not None and response.status_code < 400 and outcome.error is None:
            signal = _SUCCESS
        else:
            signal = limit_signal(attempt, outcome, started)
    finally:
        limit.release(signal)
    return outcome


def limit_signal(attempt: Attempt, outcome: Outcome, started: float) -> Signal:
    """What the try says about the host's capacity: its row of the host's table
    (state.meaning), but for one case the table cannot know.

    A try cut short by the caller's deadline (``DeadlineExceeded``) is a drop only when it
    lasted at least the host's own timeout, which would then have fired too: the host was
    slow. A shorter one only says the caller was impatient, as for the breaker.
    """
    error = outcome.error
    wire = attempt.call.wire
    if (
        error is not None
        and outcome.refused is None
        and wire.error_kind(error) is ErrorKind.DEADLINE_CUT
    ):
        connect, read = wire.timeouts(attempt.timeout)
        own = connect if wire.cut_connecting(error) else read
        if own is not None and attempt.call.runtime.clock.monotonic() - started >= own:
            return _DROP
        return _IGNORE
    return meaning_of(outcome, attempt.call).limit
