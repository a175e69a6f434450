"""The guards folded: budget > decide > breaker > throttle > limit, run in one frame for a try
that each of them admits at once, as the five stages nested run it; any other try goes
through the five stages themselves."""

from __future__ import annotations

from types import FunctionType

from resilient_session._pipeline.attempt import ANSWERED, Attempt, Outcome, Verdict
from resilient_session._pipeline.drive import Next, TryStage, compose
from resilient_session._pipeline.slots import Slots
from resilient_session._state.breaker import CircuitBreaker, Permit, TryResult
from resilient_session._state.limit import Signal

from .breaker import guard_with_breaker, recorded, settled
from .budget import pay_for_retry, spend_budget
from .decide import decide_tries, decided
from .limit import limit_concurrency, limit_signal
from .throttle import count_answer, throttle_tries

# The slots folded, in nesting order, each with the stage it must hold for the fold to stand
# for it: a chain whose slots differ there (a stage replaced, one inserted) is not folded.
FOLDED: tuple[tuple[str, TryStage], ...] = (
    ("budget", spend_budget),
    ("decide", decide_tries),
    ("breaker", guard_with_breaker),
    ("throttle", throttle_tries),
    ("limit", limit_concurrency),
)

# hot path: module-constants
_RETRY = Verdict.RETRY
_SUCCESS = TryResult.SUCCESS
_NEUTRAL = TryResult.NEUTRAL
_SLOT_SUCCESS = Signal.SUCCESS
_SLOT_IGNORE = Signal.IGNORE


def compose_folded(slots: Slots, transport: Next) -> Next:
    """*slots* composed around *transport*, their folded run (``FOLDED``) as one stage
    (``guard_tries``) when they hold it as it is, else each stage as it is."""
    names = slots.names()
    folded = [name for name, _ in FOLDED]
    start = names.index(folded[0]) if folded[0] in names else -1
    end = start + len(folded)
    if start < 0 or names[start:end] != folded:
        return compose(slots.stages(), transport)
    if any(slots[name] is not stage for name, stage in FOLDED):
        return compose(slots.stages(), transport)
    inner = compose([slots[name] for name in names[end:]], transport)
    guarded = compose([slots[name] for name in folded], inner)
    # A copy of guard_tries whose last two parameters default to the two chains, called with
    # the attempt alone, as compose() links a stage.
    # hot path: folded-guards
    linked = FunctionType(
        guard_tries.__code__, guard_tries.__globals__, guard_tries.__name__, (inner, guarded)
    )
    linked.__qualname__ = guard_tries.__qualname__
    return compose([slots[name] for name in names[:start]], linked)


def guard_tries(attempt: Attempt, call_next: Next, guarded: Next, /) -> Outcome:
    """The five stages of ``FOLDED`` around *call_next*, for a try each admits at once: no
    word from the fleet for the breaker to heed, the breaker closed, the throttle unable to
    refuse, a slot free. Any other try goes through *guarded*, the five nested.

    What each stage does after the try is done here in their order, limit first, and one
    that did not end well is handed to the stages' own steps for it (``limit_signal``,
    ``count_answer``, ``recorded``, ``decided``, ``pay_for_retry``).
    """
    # hot path: folded-guards
    call = attempt.call
    state = call.state
    breaker = state.breaker
    admission = breaker.closed_admission
    throttle = state.throttle
    if (
        admission is None
        or breaker.heed is not None
        or (throttle is not None and throttle.may_refuse)
    ):
        return guarded(attempt)
    limit = state.limit
    started = 0.0
    if limit is not None:
        if not limit.acquire_now():
            return guarded(attempt)
        # Read only for a call with a deadline, as the limit stage does.
        if call.deadline_at is not None:
            started = call.runtime.clock.monotonic()
    bucket = state.bucket
    if attempt.number == 1:
        bucket.deposit()
    permit = admission[0]
    try:
        signal = _SLOT_IGNORE  # what a try that raised gives back: its slot, and nothing else
        try:
            outcome = call_next(attempt)
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
        # Recorded even then, as the breaker stage does, so no probe slot is ever leaked.
        breaker.record(permit, _NEUTRAL)
        raise
    outcome = breaker_and_decision(attempt, outcome, happy, breaker, permit)
    if happy or outcome.decision.verdict is not _RETRY:
        return outcome
    return pay_for_retry(attempt, outcome, bucket)


def breaker_and_decision(
    attempt: Attempt, outcome: Outcome, happy: bool, breaker: CircuitBreaker, permit: Permit
) -> Outcome:
    """After a try the folded guards admitted at once, limit and throttle done: the breaker's
    record of it and the decision, as the breaker and decide stages make them, for the sync
    fold and the async one alike. A retry's payment is the caller's (awaited when async)."""
    if happy:
        breaker_state, transition = breaker.record(permit, _SUCCESS)
        # hot path: answered
        if transition is None and outcome.breaker is breaker_state:
            if outcome.decision is ANSWERED:
                # Decided a success: not a retry, which the budget alone would look at.
                return outcome
            return outcome.with_decision(ANSWERED)
        outcome = settled(attempt, outcome, breaker_state, transition)
        return outcome if outcome.decision is ANSWERED else outcome.with_decision(ANSWERED)
    return decided(attempt, recorded(attempt, outcome, breaker, permit))
