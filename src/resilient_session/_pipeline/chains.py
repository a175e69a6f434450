"""The chains an adapter runs its calls through, built once per adapter from its runtime: the
per-try chain, and the call chain around it when a host needs a call stage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .call_stage import CallStage, Run, Tries, compose_calls
from .fallback_call import FallbackCalls
from .hedging.hedged_call import HedgeCalls

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilient_session._state.fallback import FailedCall
    from resilient_session._state.runtime import Runtime
    from resilient_session._state.stale import StaleStore

    from .drive import Next


def call_stages(
    transport: Next,
    runtime: Runtime,
    fallback: Callable[[FailedCall], Any] | None = None,
    store: StaleStore | None = None,
) -> list[CallStage]:
    """The call stages *runtime*'s config and the *fallback* callable need, outermost first,
    sending on *transport*; the fallback stage keeps and finds stale answers in *store*."""
    hooks, senders = bool(runtime.hooks), bool(runtime.senders)
    stages: list[CallStage] = []
    if store is not None and (fallback is not None or runtime.stale):
        # Outermost: it sees the call's final outcome, after every hedge and retry.
        stages.append(FallbackCalls(fallback, store))
    if runtime.hedging:
        stages.append(HedgeCalls.around(transport, hooks=hooks, senders=senders))
    return stages


def call_chain(
    tries: Next,
    transport: Next,
    runtime: Runtime,
    fallback: Callable[[FailedCall], Any] | None = None,
    store: StaleStore | None = None,
) -> Run | None:
    """The call stages around a call's *tries* (the per-try chain on *transport*); None when
    *runtime*'s config and *fallback* need none, and a call runs its tries alone
    (``ResilientAdapter.send``)."""
    stages = call_stages(transport, runtime, fallback, store)
    if not stages:
        return None
    return compose_calls(stages, Tries(tries))
