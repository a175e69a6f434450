"""The async call chain an httpx transport runs its async calls through, built once from its
runtime, with the same stages as ``_pipeline/chains.py`` in the same order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .calls import AsyncCallStage, AsyncFallbackCalls, AsyncRun, AsyncTries, acompose_calls
from .hedge import AsyncHedgeCalls

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilient_session._state.fallback import FailedCall
    from resilient_session._state.runtime import Runtime
    from resilient_session._state.stale import StaleStore

    from .drive import AsyncNext


def async_call_chain(
    tries: AsyncNext,
    transport: AsyncNext,
    runtime: Runtime,
    fallback: Callable[[FailedCall], Any] | None = None,
    store: StaleStore | None = None,
) -> AsyncRun | None:
    """``chains.call_chain``, awaited: the stages its config and *fallback* need around the
    call's *tries*, in the same order; None when none is needed."""
    stages: list[AsyncCallStage] = []
    if store is not None and (fallback is not None or runtime.stale):
        stages.append(AsyncFallbackCalls(fallback, store))
    if runtime.hedging:
        stages.append(AsyncHedgeCalls.around(transport, runtime))
    if not stages:
        return None
    return acompose_calls(stages, AsyncTries(tries))
