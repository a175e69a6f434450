"""The hedging call stage's async twin: a call it may hedge (``hedged_call.hedgeable``) runs
its first try as a task, and after the host's delay each hedge as another, every one through
the async per-try chain; the first try to end wins, and the rest are cancelled.

Tasks need no timer thread nor workers: the delay is awaited on the call's clock. A loser's
cancellation gives back what its stages took (its limit slot, its breaker probe) and, on
httpx's own transport, leaves its connection closed rather than stuck in httpcore's pool
(``_transport/httpx_pool_guard.py``). The decisions are the sync race's: the delay, a token
from the budget per hedge, the host's counts and what its first try teaches the delay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from resilient_session._pipeline.attempt import (
    Attempt,
    Call,
    Decision,
    Outcome,
    Reason,
    Verdict,
    first_attempt,
)
from resilient_session._pipeline.hedging.hedged_call import hedgeable

from .stages import async_chain, tell_try

if TYPE_CHECKING:
    from resilient_session._state.hedge import HedgeState
    from resilient_session._state.runtime import Runtime

    from .calls import AsyncRun
    from .drive import AsyncNext
    from .wire import AsyncWire

_RETRY = Verdict.RETRY
_MAX_ATTEMPTS = Decision(Verdict.GIVE_UP, Reason.MAX_ATTEMPTS)
_LOST = Outcome(decision=Decision(Verdict.CANCELLED, Reason.HEDGE_LOST))


class AsyncHedgeCalls:
    """Runs a call that may be hedged as a race of tasks, any other call on *run*.

    Args:
        first: the async chain the first try of a hedged call goes through.
        hedge: the async chain each of its hedges goes through (its events say ``hedge``).
    """

    __slots__ = ("_first", "_hedge")

    def __init__(self, first: AsyncNext, hedge: AsyncNext) -> None:
        self._first = first
        self._hedge = hedge

    @classmethod
    def around(cls, transport: AsyncNext, runtime: Runtime) -> AsyncHedgeCalls:
        return cls(async_chain(transport, runtime), async_chain(transport, runtime, hedge=True))

    async def __call__(self, call: Call, run: AsyncRun, /) -> Outcome:
        hedge = hedgeable(call)
        if hedge is None:
            return await run(call)
        first = first_attempt(call)
        race = _TaskRace(call, hedge)
        outcome = await race.run(first, self._first, self._hedge)
        if outcome.decision.verdict is _RETRY and race.launched >= call.policy.retry.max_attempts:
            call.state.bucket.refund()  # no try number left for the retry it paid for
            outcome = outcome.with_decision(_MAX_ATTEMPTS)
        # As on the sync path: the retry after the race comes after its last try number.
        last = first if race.launched == 1 else first.replace(number=race.launched)
        return await run.resume(last, outcome)


class _TaskRace:
    """One hedged call's tries, each a task with a cancel scope of its own."""

    __slots__ = (
        "_call",
        "_hedge",
        "_refused",
        "_result",
        "_scopes",
        "_waiting",
        "launched",
        "winner",
    )

    def __init__(self, call: Call, hedge: HedgeState) -> None:
        self._call = call
        self._hedge = hedge
        self._scopes: dict[int, Any] = {}
        self._waiting: Any = None
        self._result: Outcome | None = None
        self._refused = 0  # hedges a guard refused: never out, so never cut
        self.launched = 1
        self.winner = 0

    async def run(self, first: Attempt, chain: AsyncNext, hedges: AsyncNext) -> Outcome:
        import anyio  # only async calls load it

        call, hedge = self._call, self._hedge
        policy = call.policy
        most = min(policy.retry.max_attempts, policy.hedging.max_extra + 1)
        delay = hedge.delay_for(policy.hedging)
        clock = call.runtime.clock
        started = clock.monotonic()
        took: list[float] = []
        async with anyio.create_task_group() as group:
            self._start(group, first, chain, took, started)
            while delay is not None and not self.winner and self.launched < most:
                with anyio.CancelScope() as waiting:
                    self._waiting = waiting  # cancelled by the try that wins
                    await clock.asleep(delay)
                if self.winner or not self._may_launch():
                    break
                self.launched += 1
                hedge.count(hedges=1)
                attempt = Attempt(call, self.launched, call.request, call.timeout)
                self._start(group, attempt, hedges, None, started)
        hedge.learn(took[0], delay, raced=self.launched > 1, cut=self.winner != 1)
        if self.winner > 1:
            hedge.count(wins=1)
        lost = self.launched - 1 - self._refused  # every try out but the winner
        if lost:
            hedge.count(cancelled=lost)
        assert self._result is not None  # noqa: S101 - the first try always ends the race
        return self._result

    def _may_launch(self) -> bool:
        call = self._call
        deadline_at = call.deadline_at
        if deadline_at is not None and call.runtime.clock.monotonic() >= deadline_at:
            return False
        return call.state.bucket.try_withdraw()  # no token, no hedge

    def _start(
        self,
        group: Any,
        attempt: Attempt,
        chain: AsyncNext,
        took: list[float] | None,
        started: float,
    ) -> None:
        import anyio

        scope = self._scopes[attempt.number] = anyio.CancelScope()
        group.start_soon(self._try, attempt, chain, scope, took, started)

    async def _try(
        self,
        attempt: Attempt,
        chain: AsyncNext,
        scope: Any,
        took: list[float] | None,
        started: float,
    ) -> None:
        outcome: Outcome | None = None
        clock = self._call.runtime.clock
        began = clock.monotonic()
        with scope:
            outcome = await chain(attempt)
        if took is not None:
            took.append(clock.monotonic() - started)
        if outcome is None:
            # Cancelled, as another try won: told as the sync race tells a try that lost.
            tell_try(attempt, _LOST, began, attempt.number > 1)
            return
        number = attempt.number
        call = self._call
        if number > 1 and outcome.refused is not None:
            call.state.bucket.refund()  # refused by a guard: no hedge went out
            self._refused += 1
            return
        if self.winner:
            response = outcome.response
            if response is not None:  # ended as the winner did: never the caller's
                wire = cast("AsyncWire", call.wire)
                await wire.arelease(response, None, call.runtime)
            return
        self.winner = number
        self._result = outcome
        for other, cut in self._scopes.items():
            if other != number:
                cut.cancel()
        if self._waiting is not None:
            self._waiting.cancel()
