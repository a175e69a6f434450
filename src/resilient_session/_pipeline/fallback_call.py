"""The fallback call stage: the answers a host gave kept on the way out of a call, and a call
that fails answered instead by the ``fallback=`` callable or by a stale answer, marked.

Outermost of the call stages, so it sees the call's final outcome, after every try, hedge and
guard: a served fallback is no try, and no guard counts it as a success or a failure.
"""

from __future__ import annotations

from inspect import isawaitable, iscoroutine
from typing import TYPE_CHECKING, Any

from resilient_session._observe.events import emit_fallback
from resilient_session._observe.hooks import CallEndHook, unwatch_call, watch_call
from resilient_session._state.fallback import (
    RESPONSE_TOO_LARGE,
    FailedCall,
    FallbackInfo,
    FallbackSource,
)

from .attempt import Call, Outcome
from .intent import caller_retries

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilient_session._state.stale import StaleStore

    from .call_stage import Run
    from .wire import Answer

# A status that says the host failed the call (DESIGN: 5xx, 408 or an overload status, and
# any other a tier retries, as 425 by default); a 4xx no tier retries is the caller's to see,
# and no fallback stands in for it.
_TIMED_OUT = 408

_STALE = FallbackSource.STALE
_CALLABLE = FallbackSource.CALLABLE


class FallbackCalls:
    """Keeps a host's good answers while ``fallback.stale`` is on, and answers a call that
    fails with *fallback*'s response, else with a stale one, else lets it end as it would.

    Args:
        fallback: the ``fallback=`` callable, or None for stale answers alone.
        store: the registry's stale store.
    """

    __slots__ = ("_fallback", "_store")

    def __init__(self, fallback: Callable[[FailedCall], Any] | None, store: StaleStore) -> None:
        self._fallback = fallback
        self._store = store

    def __call__(self, call: Call, run: Run, /) -> Outcome:
        hooks = call.runtime.hooks
        if hooks:
            token = watch_call()
            try:
                outcome = run(call)
            finally:
                unwatch_call(token)
        else:
            outcome = run(call)
        return self.settle(call, outcome)

    def settle(self, call: Call, outcome: Outcome) -> Outcome:
        """The call's final *outcome*, its answer kept, or a fallback's in its place."""
        if self._answered(call, outcome):
            return outcome
        failure = self._failure(call, outcome)
        value = None if failure is None else self._ask(failure)
        return self._end(call, outcome, failure, value)

    async def asettle(self, call: Call, outcome: Outcome) -> Outcome:
        """``settle`` for a call run by awaiting (``aio/calls.py``): a ``fallback=`` that is a
        coroutine function is awaited; a plain one is called, as on the sync path."""
        if self._answered(call, outcome):
            return outcome
        failure = self._failure(call, outcome)
        value = None if failure is None else self._ask(failure)
        if failure is not None and isawaitable(value):
            try:
                value = await value
            except Exception as exc:
                _keep_original(exc, failure.error)
                raise
        return self._end(call, outcome, failure, value)

    def _answered(self, call: Call, outcome: Outcome) -> bool:
        """Whether the call ended in the host's answer, kept (while ``fallback.stale`` is on)
        and told to the call's hooks: nothing to stand in for."""
        response = outcome.response
        if (
            response is None
            or outcome.error is not None
            or outcome.fallback is not None
            or _failed(response.status_code, call)
        ):
            return False
        if call.policy.fallback.stale.enabled and not call.stream:
            self._keep(call, response)
        if call.runtime.hooks:
            _tell(call.runtime.hooks, None)
        return True

    def _failure(self, call: Call, outcome: Outcome) -> FailedCall | None:
        """What the call that ended in *outcome* failed with, for a fallback to answer; None
        when it did not fail or its caller retries it."""
        final = outcome
        while final.fallback is not None:  # refused or unreached: what the caller gets
            final = final.fallback
        answer = final.response
        answered_well = answer is not None and not _failed(answer.status_code, call)
        if answered_well and final.error is None:
            return None  # a refused retry after an answer of the caller's to see
        if caller_retries():
            return None  # the outermost layer's fallback applies
        # A transport keeps a well-answered response beside an error for one cause only: its
        # body was over retry.max_response_bytes. The try's own reason is its status's (ok for
        # a 200), which says nothing of why the call fails.
        reason = RESPONSE_TOO_LARGE if answered_well else outcome.decision.reason.value
        return FailedCall(call.request, call.state.host, reason, answer, final.error)

    def _ask(self, failure: FailedCall) -> Any:
        """The ``fallback=`` callable's value for *failure* (None without one); an error it
        raises keeps the call's own as ``original``."""
        fallback = self._fallback
        if fallback is None:
            return None
        try:
            return fallback(failure)
        except Exception as exc:
            _keep_original(exc, failure.error)
            raise

    def _end(self, call: Call, outcome: Outcome, failure: FailedCall | None, value: Any) -> Outcome:
        """The call's outcome: *value* served when the callable gave one, else a stale answer
        when one is kept, else *outcome* itself; told, counted and logged."""
        served = None if failure is None else self._serve(call, failure, value)
        hooks = call.runtime.hooks
        if hooks:
            _tell(hooks, None if served is None else served[1].source.value)
        if served is None:
            return outcome
        answer, info = served
        state = call.state
        self._store.served(state.stale, stale=info.source is _STALE)
        emit_fallback(
            host=state.host,
            route=state.route,
            reason=info.reason,
            source=info.source.value,
            age=info.age,
            url=call.url,
            redact=call.runtime.redact,
        )
        return Outcome(answer)

    def _serve(
        self, call: Call, failure: FailedCall, value: Any
    ) -> tuple[Answer, FallbackInfo] | None:
        """The answer that stands in for the failed call, and its mark: the callable's
        *value*, else a stale answer; None when neither answers."""
        wire = call.wire
        reason = failure.reason
        replaced = failure.response
        if value is not None:
            if not wire.is_answer(value):
                raise TypeError(_not_an_answer(self._fallback, value))
            return self._served(wire, value, replaced, FallbackInfo(reason, _CALLABLE))
        stale = call.policy.fallback.stale
        if not stale.enabled:
            return None
        request = call.request
        hit = self._store.find(stale, call.method, call.url, request.headers)
        if hit is None:
            return None
        info = FallbackInfo(reason, _STALE, hit.age)
        return self._served(wire, wire.stored_answer(request, hit), replaced, info)

    @staticmethod
    def _served(
        wire: Any, answer: Answer, replaced: Answer | None, info: FallbackInfo
    ) -> tuple[Answer, FallbackInfo]:
        if replaced is not None and replaced is not answer:
            replaced.close()  # the answer it stands in for gives its connection back
        wire.mark(answer, info)
        return answer, info

    def _keep(self, call: Call, response: Answer) -> None:
        request = call.request
        self._store.keep(
            call.state.stale,
            call.policy.fallback.stale,
            call.method,
            call.url,
            request.headers,
            response.status_code,
            response.headers,
            call.wire.body(response),
            streamed=call.stream,
        )


def _failed(status: int, call: Call) -> bool:
    """Whether an answer with *status* is the host's failure: 5xx, 408, overload, or another
    status a tier retries."""
    if status >= 500 or status == _TIMED_OUT:
        return True
    retry = call.policy.retry
    return status in retry.overload_statuses or status in retry.transient_statuses


def _tell(hooks: tuple[Any, ...], source: str | None) -> None:
    for hook in hooks:
        if isinstance(hook, CallEndHook):
            hook.on_call_end(source)


def _not_an_answer(fallback: Any, value: Any) -> str:
    name = getattr(fallback, "__qualname__", None) or repr(fallback)
    if iscoroutine(value):
        value.close()  # never awaited: closed here, so no warning points elsewhere
        return (
            f"fallback {name} is a coroutine function: an async fallback answers the calls of "
            "AsyncResilientClient (or ResilientTransport's async path); give this client a "
            "plain function"
        )
    return (
        f"fallback {name} returned {type(value).__name__}, not a response: "
        "return a response to serve, or None to let the call end as it would"
    )


def _keep_original(exc: Exception, original: BaseException | None) -> None:
    """Keep *original* on *exc* as the library's errors do (``exc.original``): reachable, and
    not printed in the traceback, which shows *exc* alone."""
    if original is None or exc is original:
        return
    try:
        if getattr(exc, "original", None) is None:
            exc.original = original  # type: ignore[attr-defined]  # the library's convention
    except AttributeError:  # an exception with slots and no room for it
        pass
