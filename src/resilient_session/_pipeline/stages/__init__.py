"""The stages, outermost first: events > budget > decide > breaker > throttle > limit > deadline,
and innermost the send stage when a hook adds headers to each try sent. When a host of the
config hedges, the chain races the first try of a call it may hedge (``racing_stages``).

Each is a plain function: what a stage keeps lives in the host's state (``call.state``) and
what it runs on in the call's runtime (``call.runtime``), so none holds anything of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resilient_session._pipeline.drive import Middleware, Next, compose
from resilient_session._pipeline.hedging.chain import HedgedChain
from resilient_session._pipeline.hedging.stages import race_try, racing_events

from .breaker import guard_with_breaker
from .budget import spend_budget
from .deadline import enforce_deadline
from .decide import decide_tries
from .events import emit_events, emit_events_and_tell
from .limit import limit_concurrency
from .send import tell_senders
from .throttle import throttle_tries

if TYPE_CHECKING:
    from resilient_session._state.runtime import Runtime

__all__ = ["racing_stages", "standard_chain", "standard_stages"]


def standard_stages(*, hooks: bool = False, senders: bool = False) -> list[Middleware]:
    """The stages in nesting order; the total deadline spans every try, the per-try timeout
    is innermost, and the breaker sees each try (Polly's standard pipeline, gRPC). With
    *hooks*, the events stage also tells the registry's try hooks; with *senders*, the send
    stage goes inside them all. Chosen when the chain is built, so no try asks."""
    stages: list[Middleware] = [
        emit_events_and_tell if hooks else emit_events,
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


def racing_stages(*, hedge: bool, hooks: bool = False, senders: bool = False) -> list[Middleware]:
    """The stages of one try of a hedged call's race: the standard ones, the events stage told
    which tries lost (and, with *hedge*, that each is a hedge), and the try joining the race
    inside the deadline stage, so only a try that goes out joins it."""
    stages = standard_stages(hooks=hooks, senders=senders)
    stages[0] = racing_events(hedge=hedge, hooks=hooks)
    stages.insert(stages.index(enforce_deadline) + 1, race_try)
    return stages


def standard_chain(transport: Next, runtime: Runtime | None = None) -> Next:
    """The standard stages composed around *transport*, telling *runtime*'s hooks if any; a
    hedged chain around them when a host of *runtime*'s config hedges."""
    hooks = runtime is not None and bool(runtime.hooks)
    senders = runtime is not None and bool(runtime.senders)
    chain = compose(standard_stages(hooks=hooks, senders=senders), transport)
    if runtime is None or not runtime.hedging:
        return chain
    return HedgedChain(
        chain,
        compose(racing_stages(hedge=False, hooks=hooks, senders=senders), transport),
        compose(racing_stages(hedge=True, hooks=hooks, senders=senders), transport),
    )
