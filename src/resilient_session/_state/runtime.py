"""What every try reads and none changes: the clock, the random source and the names to redact.

One value per registry, built from its config, clock and random source, and carried by each
call (``Call.runtime``): the stages read it there instead of each holding its own copy.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from resilient_session._observe.hooks import SendHook, TryHook
from resilient_session._observe.redact import sensitive_names
from resilient_session._observe.state_report import EVENTS_ONLY, StateReport
from resilient_session.clock import Clock
from resilient_session.config import Config


# Slots rather than a NamedTuple: a try with a deadline reads the clock in two stages, and the
# interpreter specialises a slot read where a NamedTuple field goes through its descriptor.
@dataclass(frozen=True, slots=True)
class Runtime:
    """The sources a call's tries run on; the one place a test injects its clock is where this
    is built (the registry, the session or the adapter)."""

    clock: Clock
    rng: random.Random
    # The query and path parameters hidden wherever a URL or an error's text is shown.
    redact: frozenset[str]
    # Told of every try after the ``http.try`` event (``_observe/hooks.py``); empty by default,
    # so a try pays for no record unless someone listens.
    hooks: tuple[TryHook, ...] = ()
    # The hooks that also add headers to each try sent (a trace context).
    senders: tuple[SendHook, ...] = ()
    # The events and the hooks told of state changes (``_observe/state_report.py``).
    states: StateReport = EVENTS_ONLY
    # Whether any host of the config hedges: the chain is built with the race only then.
    hedging: bool = False
    # Whether any host or route of the config has a deadline.default: a session's call opens a
    # span, so the default runs from the call's start across its redirect hops.
    default_deadline: bool = False
    # Whether any host or route of the config keeps answers to serve stale (fallback.stale):
    # the call chain gets the fallback stage for it even without a fallback= callable.
    stale: bool = False


def runtime_for(
    config: Config, clock: Clock, rng: random.Random, hooks: Iterable[TryHook] = ()
) -> Runtime:
    """The runtime of a registry with *config*, on *clock* and *rng*, telling *hooks*."""
    kept = tuple(hooks)
    senders = tuple(hook for hook in kept if isinstance(hook, SendHook))
    names = sensitive_names(config.events.redact_params)
    policies = list(config.policies())
    hedging = any(policy.hedging.enabled for policy in policies)
    default_deadline = any(policy.deadline.default is not None for policy in policies)
    stale = any(policy.fallback.stale.enabled for policy in policies)
    return Runtime(
        clock, rng, names, kept, senders, StateReport(kept), hedging, default_deadline, stale
    )
