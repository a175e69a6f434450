"""The fallback call stage: the answers a host gave kept on the way out of a call, and a call
that fails answered instead by the ``fallback=`` callable or by a stale answer, marked.

Outermost of the call stages, so it sees the call's final outcome, after every try, hedge and
guard: a served fallback is no try, and no guard counts it as a success or a failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from resilient_session._observe.events import emit_fallback
from resilient_session._observe.hooks import CallEndHook, unwatch_call, watch_call
from resilient_session._state.fallback import FailedCall, FallbackInfo, FallbackSource

from .attempt import Call, Outcome
from .intent import caller_retries

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilient_session._state.stale import StaleStore

    from .call_stage import Run
    from .wire import Answer

# A status that says the host failed the call (DESIGN: 5xx, 408 or an overload status); any
# other 4xx is the caller's to see, and no fallback stands in for it.
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
        """The call's final *outcome*, its answer kept, or a fallback's in its place; the
        async twin (``aio/calls.py``) runs the call its own way and ends here too."""
        hooks = call.runtime.hooks
        response = outcome.response
        if (
            response is not None
            and outcome.error is None
            and outcome.fallback is None
            and not _failed(response.status_code, call)
        ):
            if call.policy.fallback.stale.enabled and not call.stream:
                self._keep(call, response)
            if hooks:
                _tell(hooks, None)
            return outcome
        served = self._serve(call, outcome)
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

    def _serve(self, call: Call, outcome: Outcome) -> tuple[Answer, FallbackInfo] | None:
        """The answer a fallback gives the call that ended in *outcome*, and its mark; None
        when the call did not fail, its caller retries it, or no fallback answers."""
        final = outcome
        while final.fallback is not None:  # refused or unreached: what the caller gets
            final = final.fallback
        answer = final.response
        if final.error is None and answer is not None and not _failed(answer.status_code, call):
            return None  # a refused retry after an answer of the caller's to see
        if caller_retries():
            return None  # the outermost layer's fallback applies
        reason = outcome.decision.reason.value
        replaced = final.response
        wire = call.wire
        fallback = self._fallback
        if fallback is not None:
            failed = FailedCall(call.request, call.state.host, reason, replaced, final.error)
            try:
                value = fallback(failed)
            except Exception as exc:
                original = final.error
                if original is not None and exc is not original:
                    _keep_original(exc, original)
                raise
            if value is not None:
                if not wire.is_answer(value):
                    name = getattr(fallback, "__qualname__", None) or repr(fallback)
                    raise TypeError(
                        f"fallback {name} returned {type(value).__name__}, not a response: "
                        "return a response to serve, or None to let the call end as it would"
                    )
                info = FallbackInfo(reason, _CALLABLE)
                return self._served(wire, value, replaced, info)
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
    """Whether an answer with *status* is the host's failure: 5xx, 408 or overload."""
    return status >= 500 or status == _TIMED_OUT or status in call.policy.retry.overload_statuses


def _tell(hooks: tuple[Any, ...], source: str | None) -> None:
    for hook in hooks:
        if isinstance(hook, CallEndHook):
            hook.on_call_end(source)


def _keep_original(exc: Exception, original: BaseException) -> None:
    """Keep *original* on *exc* as the library's errors do (``exc.original``): reachable, and
    not printed in the traceback, which shows *exc* alone."""
    try:
        if getattr(exc, "original", None) is None:
            exc.original = original  # type: ignore[attr-defined]  # the library's convention
    except AttributeError:  # an exception with slots and no room for it
        pass
