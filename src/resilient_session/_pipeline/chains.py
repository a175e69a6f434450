"""The chains an adapter runs its calls through, built once per adapter from its runtime: the
per-try chain, and the call chain around it when a host needs a call stage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .call_stage import CallStage, Run, Tries, compose_calls
from .hedging.hedged_call import HedgeCalls

if TYPE_CHECKING:
    from resilient_session._state.runtime import Runtime

    from .drive import Next


def call_stages(transport: Next, runtime: Runtime) -> list[CallStage]:
    """The call stages *runtime*'s config needs, outermost first, sending on *transport*."""
    hooks, senders = bool(runtime.hooks), bool(runtime.senders)
    stages: list[CallStage] = []
    if runtime.hedging:
        stages.append(HedgeCalls.around(transport, hooks=hooks, senders=senders))
    return stages


def call_chain(tries: Next, transport: Next, runtime: Runtime) -> Run | None:
    """The call stages around a call's *tries* (the per-try chain on *transport*); None when
    *runtime*'s config needs none, and a call runs its tries alone (``ResilientAdapter.send``)."""
    stages = call_stages(transport, runtime)
    if not stages:
        return None
    return compose_calls(stages, Tries(tries))
