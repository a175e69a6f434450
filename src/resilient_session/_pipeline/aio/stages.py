"""The async twins of the try stages, in the same order and slots: each awaits the stages
inside it where its sync twin calls them, and decides with the same functions."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from resilient_session._observe.events import STRUCTLOG_STATE, logger_for
from resilient_session._pipeline.attempt import (
    ANSWERED,
    Attempt,
    Outcome,
    Reason,
    Verdict,
)
from resilient_session._pipeline.refusal import refuse
from resilient_session._pipeline.stages.breaker import (
    breaker_refusal,
    recorded,
    report,
    settled,
)
from resilient_session._pipeline.stages.deadline import attempt_value
from resilient_session._pipeline.stages.decide import decide
from resilient_session._pipeline.stages.limit import limit_signal
from resilient_session._pipeline.stages.send import tell_senders as sync_tell_senders
from resilient_session._pipeline.stages.throttle import count_answer, throttle_refusal
from resilient_session._pipeline.stages.try_record import try_record
from resilient_session._pipeline.wire import ErrorKind
from resilient_session._state.breaker import TryResult
from resilient_session._state.limit import Signal

from .drive import AsyncNext, AsyncTryStage, acompose
from .guards import apay_for_retry, linked_guards

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from resilient_session._pipeline.drive import Next
    from resilient_session._state.runtime import Runtime

    from .wire import AsyncWire

_INFO = logging.INFO
_STRUCTLOG = STRUCTLOG_STATE
_RETRY = Verdict.RETRY


def _happy(outcome: Outcome) -> bool:
    # hot path: happy
    response = outcome.response
    return response is not None and response.status_code < 400 and outcome.error is None


async def emit_events(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.events.emit_events_and_tell``, awaited: one ``http.try`` event per try, and
    every hook told the same record.

    A try no one listens to (no hook, structlog not configured) reads no clock and makes no
    record: structlog's own flag is read before and after it, as the sync stage reads it.
    """
    if attempt.call.runtime.hooks or _STRUCTLOG.is_configured:
        return await _emit(attempt, call_next, False)
    outcome = await call_next(attempt)
    # hot path: events-off
    if not _STRUCTLOG.is_configured:
        return outcome
    # Configured while the try ran: told as the sync stage tells a try, from its end.
    tell_try(attempt, outcome, attempt.call.runtime.clock.monotonic(), False)
    return outcome


async def emit_hedge_events(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``emit_events`` for a hedge of a raced call: its event says so (``hedge``)."""
    return await _emit(attempt, call_next, True)


async def _emit(attempt: Attempt, call_next: AsyncNext, hedge: bool) -> Outcome:
    started = attempt.call.runtime.clock.monotonic()
    outcome = await call_next(attempt)
    tell_try(attempt, outcome, started, hedge)
    return outcome


def tell_try(attempt: Attempt, outcome: Outcome, started: float, hedge: bool) -> None:
    """One ``http.try`` event for *attempt*, begun at *started*, ended in *outcome*, and
    every try hook told the same record; nothing when no one listens."""
    runtime = attempt.call.runtime
    if not runtime.hooks and not _STRUCTLOG.is_configured:
        return
    end = runtime.clock.monotonic()
    record = try_record(attempt, outcome, started, end, runtime.redact, hedge)
    logger = logger_for(_INFO)
    if logger is not None:
        logger.info("http.try", **record.event_fields())
    for hook in runtime.hooks:
        hook.on_try(record)


async def spend_budget(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.budget.spend_budget``, awaited, its answer released by awaiting."""
    bucket = attempt.call.state.bucket
    if attempt.number == 1:
        bucket.deposit()
    outcome = await call_next(attempt)
    if outcome.decision.verdict is not _RETRY:
        return outcome
    return await apay_for_retry(attempt, outcome, bucket)


async def decide_tries(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.decide.decide_tries``, awaited."""
    outcome = await call_next(attempt)
    if _happy(outcome):
        return outcome if outcome.decision is ANSWERED else outcome.with_decision(ANSWERED)
    decision = decide(attempt, outcome)
    error = outcome.error
    if (
        decision.verdict is not _RETRY
        and attempt.last_real is not None
        and error is not None
        and attempt.call.wire.error_kind(error) is ErrorKind.CONNECT
    ):
        return outcome._replace(decision=decision, fallback=attempt.last_real)
    return outcome.with_decision(decision)


async def guard_with_breaker(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.breaker.guard_with_breaker``, awaited; the fleet's word heeded by awaiting."""
    breaker = attempt.call.state.breaker
    aheed = breaker.aheed
    if aheed is not None:
        await aheed()
    permit, opened_to_probe = breaker.closed_admission or breaker.allow()
    if opened_to_probe is not None:
        report(attempt, opened_to_probe)
    if permit is None:
        return breaker_refusal(attempt, breaker)
    try:
        outcome = await call_next(attempt)
    except BaseException:
        # A cancelled try gives back its probe and is no try, as a hedge that lost on the
        # sync path: it says nothing of the host.
        breaker.record(permit, TryResult.NEUTRAL, False, False)
        raise
    if _happy(outcome):
        state, transition = breaker.record(permit, TryResult.SUCCESS)
        return settled(attempt, outcome, state, transition)
    return recorded(attempt, outcome, breaker, permit)


async def throttle_tries(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.throttle.throttle_tries``, awaited."""
    state = attempt.call.state
    throttle = state.throttle
    if throttle is None:
        return await call_next(attempt)
    if throttle.may_refuse and state.breaker.closed_admission is not None:
        refusal = throttle_refusal(attempt, throttle)
        if refusal is not None:
            return refusal
    outcome = await call_next(attempt)
    if _happy(outcome):
        throttle.accepted(attempt.call.started_at)
        return outcome
    count_answer(attempt, outcome, throttle)
    return outcome


async def limit_concurrency(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.limit.limit_concurrency``, a slot awaited (``aacquire``) and given back
    whatever ends the try, a cancellation included."""
    call = attempt.call
    limit = call.state.limit
    if limit is None:
        return await call_next(attempt)
    deadline_at = call.deadline_at
    if not await limit.aacquire(deadline_at):
        return refuse(
            attempt,
            Reason.CONCURRENCY_LIMIT,
            f"concurrency limit for {limit.host} is full ({limit.limit} tries in flight) "
            "and no slot freed in time; the try was not sent",
        )
    started = call.runtime.clock.monotonic() if deadline_at is not None else 0.0
    signal = Signal.IGNORE  # what a try that raised or was cancelled gives back: its slot
    try:
        outcome = await call_next(attempt)
        signal = Signal.SUCCESS if _happy(outcome) else limit_signal(attempt, outcome, started)
    finally:
        limit.release(signal)
    return outcome


async def enforce_deadline(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.deadline.enforce_deadline``, the try bounded by a cancel scope
    (``AsyncWire.abounded``) where the sync one is bounded by its clamped timeouts."""
    call = attempt.call
    deadline_at = call.deadline_at
    # An async call's wire is an AsyncWire: narrowed by annotation, not typing.cast.
    # hot path: no-cast
    wire: AsyncWire = call.wire  # type: ignore[assignment]
    if deadline_at is None:
        attempt_header = call.policy.deadline.attempt_header
        if attempt_header is None:
            return await call_next(attempt)
        request = attempt.request
        # hot path: single-header
        sent = wire.with_header(
            request, attempt_header, attempt_value(attempt), attempt.number == 1
        )
        if sent is request:  # written into the call's own request: no copy, no new attempt
            return await call_next(attempt)
        return await call_next(attempt.sending(sent, attempt.timeout))
    remaining = deadline_at - call.runtime.clock.monotonic()
    if remaining <= 0:
        return refuse(
            attempt,
            Reason.DEADLINE_SPENT,
            f"deadline for {call.method} {call.state.key} spent before try {attempt.number}",
        )
    timeout, connect_cut, read_cut = wire.clamped(attempt.timeout, remaining)
    request = attempt.request
    names = call.policy.deadline
    values: list[tuple[str, str]] = []
    if names.header is not None:
        values.append((names.header, str(int(remaining * 1000))))
    if names.attempt_header is not None:
        values.append((names.attempt_header, attempt_value(attempt)))
    if values:
        request = wire.with_headers(request, values, attempt.number == 1)
    message = f"deadline for {call.method} {call.state.key} ran out during try {attempt.number}"
    outcome = None
    with wire.abounded(remaining) as bound:
        outcome = await call_next(attempt.sending(request, timeout))
    if outcome is None:  # the scope cancelled the try: nothing came back
        return Outcome(error=wire.refusal(Reason.DEADLINE, message, attempt.request))
    if bound.fired or outcome.error is not None:
        exceeded = wire.deadline_error(
            bound.fired,
            outcome.error,
            outcome.response,
            (connect_cut, read_cut),
            message,
            attempt.request,
            call.runtime.redact,
        )
        if exceeded is not None:
            return Outcome(error=exceeded)
    return outcome


async def tell_senders(attempt: Attempt, call_next: AsyncNext, /) -> Outcome:
    """``stages.send.tell_senders`` itself: it hands the try, its headers added, to
    *call_next* and returns what that returns, here the awaitable of the stages inside."""
    return await cast("Awaitable[Outcome]", sync_tell_senders(attempt, cast("Next", call_next)))


def async_stages(*, senders: bool = False, hedge: bool = False) -> list[AsyncTryStage]:
    """The async stages, outermost first, as ``standard_slots`` orders the sync ones; with
    *senders*, the send stage innermost; with *hedge*, each try's event says it is a hedge."""
    stages: list[AsyncTryStage] = [
        emit_hedge_events if hedge else emit_events,
        spend_budget,
        decide_tries,
        guard_with_breaker,
        throttle_tries,
        limit_concurrency,
        enforce_deadline,
    ]
    if senders:
        stages.append(tell_senders)
    return stages


def async_chain(transport: AsyncNext, runtime: Runtime, *, hedge: bool = False) -> AsyncNext:
    """The async stages, in the sync chain's order (``stages/__init__.py``), awaited around
    *transport*; the five guards between the events and the deadline run folded into one
    stage for a try they all admit at once (``guards.py``), as ``standard_chain`` runs them."""
    stages = async_stages(senders=bool(runtime.senders), hedge=hedge)
    inner = acompose(stages[_FOLDED_END:], transport)
    guarded = acompose(stages[1:_FOLDED_END], inner)
    return acompose(stages[:1], linked_guards(inner, guarded))


# The guards' run in async_stages: budget, decide, breaker, throttle and limit.
_FOLDED_END = 6
