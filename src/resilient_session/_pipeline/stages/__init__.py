"""The stages, outermost first: events > budget > decide > breaker > throttle > limit > deadline,
and innermost the send stage when a hook adds headers to each try sent, each in a named slot
(``standard_slots``), from which hedging's racing chains are built (``hedging/racing_stages.py``).

Each is a plain function: what a stage keeps lives in the host's state (``call.state``) and
what it runs on in the call's runtime (``call.runtime``), so none holds anything of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resilient_session._pipeline.drive import Next, TryStage
from resilient_session._pipeline.slots import Slots

from .breaker import guard_with_breaker
from .budget import spend_budget
from .deadline import enforce_deadline
from .decide import decide_tries
from .events import emit_events, emit_events_and_tell
from .guards import compose_folded
from .limit import limit_concurrency
from .send import tell_senders
from .throttle import throttle_tries

if TYPE_CHECKING:
    from resilient_session._state.runtime import Runtime

__all__ = ["standard_chain", "standard_slots", "standard_stages"]


def standard_slots(*, hooks: bool = False, senders: bool = False) -> Slots:
    """The stages in nesting order, by slot name; the total deadline spans every try, the
    per-try timeout is innermost, and the breaker sees each try (Polly's standard pipeline,
    gRPC). With *hooks*, the events stage also tells the registry's try hooks; with *senders*,
    the send stage goes inside them all. Chosen when the chain is built, so no try asks."""
    named: list[tuple[str, TryStage]] = [
        ("events", emit_events_and_tell if hooks else emit_events),
        ("budget", spend_budget),
        ("decide", decide_tries),
        ("breaker", guard_with_breaker),
        ("throttle", throttle_tries),
        ("limit", limit_concurrency),
        ("deadline", enforce_deadline),
    ]
    if senders:
        named.append(("send", tell_senders))
    return Slots(named)


def standard_stages(*, hooks: bool = False, senders: bool = False) -> list[TryStage]:
    """The stages of ``standard_slots``, outermost first."""
    return standard_slots(hooks=hooks, senders=senders).stages()


def standard_chain(transport: Next, runtime: Runtime | None = None) -> Next:
    """The standard stages composed around *transport*, telling *runtime*'s hooks if any: the
    per-try chain every try of a call goes through but a raced one (``_pipeline/chains.py``).
    The guards between the events and the deadline run folded into one stage for a try they
    all admit at once (``guards.py``)."""
    hooks = runtime is not None and bool(runtime.hooks)
    senders = runtime is not None and bool(runtime.senders)
    return compose_folded(standard_slots(hooks=hooks, senders=senders), transport)
