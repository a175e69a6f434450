"""The per-try level of the pipeline: try stages, their composition into a chain, and the one
loop that drives a call's tries on it (the per-call level, around it, is ``call_stage.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import FunctionType
from typing import Protocol, TypeAlias

from .attempt import Attempt, Outcome, Verdict

Next: TypeAlias = Callable[[Attempt], Outcome]

_RETRY = Verdict.RETRY  # hot path: module-constants


class TryStage(Protocol):
    """One stage of the per-try chain: runs once per try, around the stages inside it."""

    def __call__(self, attempt: Attempt, call_next: Next, /) -> Outcome: ...


def compose(stages: Sequence[TryStage], transport: Next) -> Next:
    """Chain *stages* around *transport*; the first one is the outermost."""
    handler = transport
    for stage in reversed(stages):
        handler = _link(stage, handler)
    return handler


def _link(middleware: TryStage, call_next: Next) -> Next:
    if isinstance(middleware, FunctionType) and middleware.__code__.co_posonlyargcount == 2:
        # hot path: linked-stages
        # A copy of the stage function whose second parameter defaults to *call_next*: it is
        # called with the attempt alone, as the link, without a frame of its own in between.
        linked = FunctionType(
            middleware.__code__,
            middleware.__globals__,
            middleware.__name__,
            (call_next,),
            middleware.__closure__,
        )
        linked.__qualname__ = middleware.__qualname__
        linked.__kwdefaults__ = middleware.__kwdefaults__
        linked.__dict__.update(middleware.__dict__)
        linked.__wrapped__ = middleware  # type: ignore[attr-defined]
        return linked
    # A stage that is an object is called through its bound __call__: calling the object
    # itself takes a slower path through the interpreter, once per stage per try.
    stage = middleware if isinstance(middleware, FunctionType) else middleware.__call__
    # One scope per link, so each closure keeps its own call_next.
    return lambda attempt: stage(attempt, call_next)


def drive(handler: Next, attempt: Attempt) -> Outcome:
    """Run tries until a decision is final, from *attempt* on."""
    return resume(handler, attempt, handler(attempt))


def resume(handler: Next, attempt: Attempt, outcome: Outcome) -> Outcome:
    """Run tries after *attempt* ended in *outcome* until a decision is final; the only loop
    and the only place that sleeps, on the call's clock."""
    while True:
        decision = outcome.decision
        if decision.verdict is not _RETRY:
            return outcome
        if decision.wait > 0:
            attempt.call.runtime.clock.sleep(decision.wait)
        attempt = attempt.next(outcome)
        outcome = handler(attempt)
