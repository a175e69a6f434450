"""The stages, outermost first: events > budget > decide > breaker > throttle > limit > deadline."""

from __future__ import annotations

import random

from resilient_session._observe.redact import SENSITIVE_PARAMS
from resilient_session._pipeline.drive import Middleware, Next, compose
from resilient_session.clock import Clock

from .breaker import guard_with_breaker
from .budget import SpendBudget
from .deadline import EnforceDeadline
from .decide import Decide
from .events import EmitEvents
from .limit import LimitConcurrency
from .throttle import throttle_tries

__all__ = ["standard_chain", "standard_stages"]


def standard_stages(
    *, clock: Clock, rng: random.Random, redact: frozenset[str] = SENSITIVE_PARAMS
) -> list[Middleware]:
    """The stages in nesting order; the total deadline spans every try, the per-try timeout
    is innermost, and the breaker sees each try (Polly's standard pipeline, gRPC)."""
    return [
        EmitEvents(clock, redact),
        SpendBudget(clock, redact),
        Decide(clock, rng),
        guard_with_breaker,
        throttle_tries,
        LimitConcurrency(clock),
        EnforceDeadline(clock, redact),
    ]


def standard_chain(
    transport: Next,
    *,
    clock: Clock,
    rng: random.Random,
    redact: frozenset[str] = SENSITIVE_PARAMS,
) -> Next:
    """The standard stages composed around *transport*."""
    return compose(standard_stages(clock=clock, rng=rng, redact=redact), transport)
