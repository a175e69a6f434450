"""The stages, outermost first: events > budget > decide > breaker > throttle > limit > deadline.

Each is a plain function: what a stage keeps lives in the host's state (``call.state``) and
what it runs on in the call's runtime (``call.runtime``), so none holds anything of its own.
"""

from __future__ import annotations

from resilient_session._pipeline.drive import Middleware, Next, compose

from .breaker import guard_with_breaker
from .budget import spend_budget
from .deadline import enforce_deadline
from .decide import decide_tries
from .events import emit_events
from .limit import limit_concurrency
from .throttle import throttle_tries

__all__ = ["standard_chain", "standard_stages"]


def standard_stages() -> list[Middleware]:
    """The stages in nesting order; the total deadline spans every try, the per-try timeout
    is innermost, and the breaker sees each try (Polly's standard pipeline, gRPC)."""
    return [
        emit_events,
        spend_budget,
        decide_tries,
        guard_with_breaker,
        throttle_tries,
        limit_concurrency,
        enforce_deadline,
    ]


def standard_chain(transport: Next) -> Next:
    """The standard stages composed around *transport*."""
    return compose(standard_stages(), transport)
