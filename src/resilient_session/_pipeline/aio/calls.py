"""The async call level: call stages awaited around a call's tries, as ``call_stage.py``'s
are called around them, and the fallback stage's async twin, which runs the call by awaiting
and ends it with the sync stage's own ``settle``."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol

from resilient_session._observe.hooks import unwatch_call, watch_call
from resilient_session._pipeline.attempt import Attempt, Call, Outcome, Verdict, first_attempt
from resilient_session._pipeline.fallback_call import FallbackCalls

from .drive import AsyncNext, aresume

_RETRY = Verdict.RETRY


class AsyncRun(Protocol):
    """``call_stage.Run``, awaited."""

    def __call__(self, call: Call, /) -> Awaitable[Outcome]: ...

    def resume(self, attempt: Attempt, outcome: Outcome, /) -> Awaitable[Outcome]: ...


class AsyncCallStage(Protocol):
    """One stage of the async call chain: runs once per call, around the stages inside."""

    def __call__(self, call: Call, run: AsyncRun, /) -> Awaitable[Outcome]: ...


async def afirst_and_retries(chain: AsyncNext, call: Call) -> Outcome:
    """``call_stage.first_and_retries`` on the async per-try *chain*, each try awaited;
    ``handle_async_request`` awaits it directly when no call stage is configured."""
    first = first_attempt(call)
    outcome = await chain(first)
    if outcome.decision.verdict is _RETRY:
        outcome = await aresume(chain, first, outcome)
    return outcome


class AsyncTries:
    """The innermost run as the async call chain holds it: ``afirst_and_retries``."""

    __slots__ = ("chain",)

    def __init__(self, chain: AsyncNext) -> None:
        self.chain = chain

    def __call__(self, call: Call, /) -> Awaitable[Outcome]:
        return afirst_and_retries(self.chain, call)

    def resume(self, attempt: Attempt, outcome: Outcome, /) -> Awaitable[Outcome]:
        return aresume(self.chain, attempt, outcome)


class _AsyncCallLink:
    __slots__ = ("_inner", "_stage", "resume")

    def __init__(self, stage: AsyncCallStage, inner: AsyncRun) -> None:
        self._stage = stage
        self._inner = inner
        self.resume = inner.resume

    def __call__(self, call: Call, /) -> Awaitable[Outcome]:
        return self._stage(call, self._inner)


def acompose_calls(stages: Sequence[AsyncCallStage], tries: AsyncTries) -> AsyncRun:
    """Chain the async call *stages* around *tries*; the first one is the outermost."""
    run: AsyncRun = tries
    for stage in reversed(stages):
        run = _AsyncCallLink(stage, run)
    return run


class AsyncFallbackCalls(FallbackCalls):
    """``FallbackCalls`` for a call run by awaiting: the same keeping and serving. A
    ``fallback=`` that is a coroutine function is awaited; a plain one is called as on the
    sync path (it must not block the loop for long)."""

    __slots__ = ()

    async def __call__(self, call: Call, run: AsyncRun, /) -> Outcome:  # type: ignore[override]
        if call.runtime.hooks:
            token = watch_call()
            try:
                outcome = await run(call)
            finally:
                unwatch_call(token)
        else:
            outcome = await run(call)
        return await self.asettle(call, outcome)
