"""The async per-try chain: its composition, and the one awaited loop over a call's tries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeAlias, cast

from resilient_session._pipeline.attempt import Attempt, Outcome, Verdict
from resilient_session._pipeline.drive import Next, TryStage, compose

AsyncNext: TypeAlias = Callable[[Attempt], Awaitable[Outcome]]

_RETRY = Verdict.RETRY


class AsyncTryStage(Protocol):
    """One async stage of the per-try chain."""

    def __call__(self, attempt: Attempt, call_next: AsyncNext, /) -> Awaitable[Outcome]: ...


def acompose(stages: Sequence[AsyncTryStage], transport: AsyncNext) -> AsyncNext:
    """Chain *stages* around *transport*; the first one is the outermost.

    Linked as the sync stages are (``drive.compose``): a coroutine function's copy whose
    ``call_next`` is a default is called with the attempt alone and returns the stage's own
    coroutine, with no frame of a link's in between.
    """
    # hot path: linked-stages
    return cast(AsyncNext, compose(cast("Sequence[TryStage]", stages), cast(Next, transport)))


async def aresume(handler: AsyncNext, attempt: Attempt, outcome: Outcome) -> Outcome:
    """``drive.resume``, awaited: tries after *attempt* until a decision is final, each wait
    on the call's clock without blocking the loop.

    A task cancelled during a wait gives back the token its retry took from the budget: the
    retry it was for will not be sent.
    """
    while True:
        decision = outcome.decision
        if decision.verdict is not _RETRY:
            return outcome
        if decision.wait > 0:
            try:
                await attempt.call.runtime.clock.asleep(decision.wait)
            except BaseException:
                attempt.call.state.bucket.refund()
                raise
        attempt = attempt.next(outcome)
        outcome = await handler(attempt)
