"""The async guards folded: ``stages/guards.py``'s fold, awaited. Budget > decide > breaker >
throttle > limit run in one coroutine for a try each of them admits at once, as the five async
stages nested run it; any other try goes through the five async stages themselves."""

from __future__ import annotations

from types import FunctionType
from typing import TYPE_CHECKING, cast

from resilient_session._pipeline.attempt import (
    Attempt,
    Decision,
    Outcome,
    Reason,
    Verdict,
)
from resilient_session._pipeline.stages.guards import breaker_and_decision
from resilient_session._pipeline.stages.limit import limit_signal
from resilient_session._pipeline.stages.throttle import count_answer
from resilient_session._state.breaker import TryResult
from resilient_session._state.budget import TokenBucket
from resilient_session._state.limit import Signal

if TYPE_CHECKING:
    from .drive import AsyncNext
    from .wire import AsyncWire

# hot path: module-constants
_RETRY = Verdict.RETRY
_SUCCESS = TryResult.SUCCESS
_NEUTRAL = TryResult.NEUTRAL
_SLOT_SUCCESS = Signal.SUCCESS
_SLOT_IGNORE = Signal.IGNORE
_BUDGET_EXHAUSTED = Decision(Verdict.GIVE_UP, Reason.BUDGET_EXHAUSTED)
_DEADLINE = Decision(Verdict.GIVE_UP, Reason.DEADLINE)


def linked_guards(inner: AsyncNext, guarded: AsyncNext) -> AsyncNext:
    """A copy of :func:`aguard_tries` whose last two parameters default to *inner* (the
    stages inside the guards) and *guarded* (the five async guards nested around *inner*),
    called with the attempt alone, as ``drive.compose`` links a stage."""
    # hot path: folded-guards
    linked = FunctionType(
        aguard_tries.__code__, aguard_tries.__globals__, aguard_tries.__name__, (inner, guarded)
    )
    linked.__qualname__ = aguard_tries.__qualname__
    return cast("AsyncNext", linked)


async def aguard_tries(attempt: Attempt, call_next: AsyncNext, guarded: AsyncNext, /) -> Outcome:
    """The five async guards around *call_next*, for a try each admits at once: no word from
    the fleet for the breaker to await, the breaker closed, the throttle unable to refuse, a
    slot free. Any other try goes through *guarded*, the five nested.

    What each does after the try is done here in their order, limit first, as the sync fold
    does it; a try that did not end well is handed to the stages' own steps for it, and a
    retry's answer is released by awaiting, as the async budget stage releases it. A try that
    raises or is cancelled gives back its slot and its permit, as the async stages do.
    """
    # hot path: folded-guards
    call = attempt.call
    state = call.state
    breaker = state.breaker
    admission = breaker.closed_admission
    throttle = state.throttle
    if (
        admission is None
        or breaker.aheed is not None
        or (throttle is not None and throttle.may_refuse)
    ):
        return await guarded(attempt)
    limit = state.limit
    started = 0.0
    if limit is not None:
        if not limit.acquire_now():
            return await guarded(attempt)
        # Read only for a call with a deadline, as the limit stage does.
        if call.deadline_at is not None:
            started = call.runtime.clock.monotonic()
    bucket = state.bucket
    if attempt.number == 1:
        bucket.deposit()
    permit = admission[0]
    try:
        signal = _SLOT_IGNORE  # what a try that raised or was cancelled gives back: its slot
        try:
            outcome = await call_next(attempt)
            response = outcome.response
            # hot path: happy
            happy = response is not None and response.status_code < 400 and outcome.error is None
            if limit is not None:
                signal = _SLOT_SUCCESS if happy else limit_signal(attempt, outcome, started)
        finally:
            if limit is not None:
                limit.release(signal)
        if throttle is not None:
            if happy:
                throttle.accepted(call.started_at)
            else:
                count_answer(attempt, outcome, throttle)
    except BaseException:
        # A cancelled try gives back its probe and is no try, as the async breaker stage
        # records it.
        breaker.record(permit, _NEUTRAL, False, False)
        raise
    outcome = breaker_and_decision(attempt, outcome, happy, breaker, permit)
    if happy or outcome.decision.verdict is not _RETRY:
        return outcome
    return await apay_for_retry(attempt, outcome, bucket)


async def apay_for_retry(attempt: Attempt, outcome: Outcome, bucket: TokenBucket) -> Outcome:
    """``stages.budget.pay_for_retry``, its answer released by awaiting: a token for the retry
    *outcome* decided, and the answer it replaces let go of; the outcome ends the call
    instead when no token is left, or when the caller's deadline ran out during the read."""
    if not bucket.try_withdraw():
        return outcome.with_decision(_BUDGET_EXHAUSTED)
    answer = outcome.response
    if answer is not None:
        call = attempt.call
        wire = cast("AsyncWire", call.wire)
        try:
            cut = await wire.arelease(answer, call.deadline_at, call.runtime)
        except BaseException:
            bucket.refund()  # cancelled while releasing: the retry will not be sent
            raise
        if cut is not None:
            bucket.refund()
            return Outcome(answer, cut, _DEADLINE, breaker=outcome.breaker)
    return outcome
