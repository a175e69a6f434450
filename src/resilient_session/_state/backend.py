"""Where per-host state lives: a memory backend (the default) and the factory that picks one
(the interface they implement is in ``interface.py``)."""

from __future__ import annotations

import random

from resilient_session._observe.state_report import EVENTS_ONLY, StateReport
from resilient_session.clock import Clock
from resilient_session.config.policy import HostPolicy, StatePolicy
from resilient_session.errors import ConfigError

from .breaker import CircuitBreaker
from .budget import TokenBucket
from .interface import Guards, Held, HostsNow, StateBackend
from .throttle import AdaptiveThrottle


class MemoryBackend:
    """State in this process only, each guard behind its own lock: what every worker process
    had before there was a choice, and still the default."""

    name = "memory"
    degraded = False

    def __init__(self, clock: Clock, rng: random.Random) -> None:
        self._clock = clock
        self._rng = rng

    def build(self, key: str, policy: HostPolicy, route: str | None = None) -> Guards:
        clock, rng = self._clock, self._rng
        return (
            CircuitBreaker(key, policy.breaker, clock, rng, route),
            TokenBucket(policy.budget, clock),
            AdaptiveThrottle(policy.throttle, clock, rng) if policy.throttle.enabled else None,
        )

    def serve(self, hosts: HostsNow) -> None:
        """Nothing to keep in step: the guards are the state."""

    def added(self, host: Held) -> None:
        """Nothing to do."""

    def close(self) -> None:
        """Nothing held."""


def open_backend(
    policy: StatePolicy, clock: Clock, rng: random.Random, report: StateReport = EVENTS_ONLY
) -> StateBackend:
    """The backend *policy* selects; a shared one reports the changes it learns to *report*.

    Raises:
        ConfigError: ``state.backend`` is ``redis`` and redis-py is not installed.
    """
    if policy.backend == "memory":
        return MemoryBackend(clock, rng)
    try:
        # Imported only when selected: redis-py is an extra.
        from .fleet.redis_backend import RedisBackend
    except ImportError as missing:
        raise ConfigError(
            "state.backend: 'redis' needs redis-py, which is not installed "
            f"({missing.msg}); install the extra: pip install 'resilient-session[redis]'"
        ) from None
    return RedisBackend(policy, clock, rng, report)
