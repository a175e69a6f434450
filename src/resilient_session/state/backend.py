"""Where per-host state lives: one interface, a memory backend (the default) and the factory."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from resilient_session.clock import Clock
from resilient_session.errors import ConfigError
from resilient_session.policy import HostPolicy, StatePolicy

from .breaker import CircuitBreaker
from .budget import TokenBucket
from .limit import ConcurrencyLimit
from .throttle import AdaptiveThrottle

# A host's guards, as a backend builds them: the throttle is None when the policy disables it.
Guards = tuple[CircuitBreaker, TokenBucket, AdaptiveThrottle | None]
# One host as the registry holds it: its key, policy and guards, and its concurrency limit
# (None when disabled), whose tries in flight say the host is in use.
Held = tuple[str, HostPolicy, Guards, ConcurrencyLimit | None]
# What the registry holds now.
HostsNow = Callable[[], list[Held]]


class StateBackend(Protocol):
    """Builds each host's breaker, budget and throttle, and keeps them in step wherever it
    keeps state. The stages only ever see the objects it builds, never the backend: a backend
    may hand out subclasses that note what changed, but their methods answer from local
    fields, so a call never waits on the backend.
    """

    @property
    def name(self) -> str:
        """The ``state.backend`` value this backend implements."""

    @property
    def degraded(self) -> bool:
        """True while the shared store is out of reach and the guards run on local state."""

    def build(self, key: str, policy: HostPolicy) -> Guards:
        """Fresh guards for host *key*."""

    def serve(self, hosts: HostsNow) -> None:
        """Keep in step, from now on, the guards *hosts* returns at each moment: exactly the
        registry's, evictions and races included, with no list of its own to drift."""

    def added(self, host: Held) -> None:
        """The registry just made *host*'s guards (and may have evicted another host's): a
        chance to bring them in step soon."""

    def close(self) -> None:
        """Release what the backend holds (a thread, connections); the guards keep working
        on local state."""


class MemoryBackend:
    """State in this process only, each guard behind its own lock: what every worker process
    had before there was a choice, and still the default."""

    name = "memory"
    degraded = False

    def __init__(self, clock: Clock, rng: random.Random) -> None:
        self._clock = clock
        self._rng = rng

    def build(self, key: str, policy: HostPolicy) -> Guards:
        clock, rng = self._clock, self._rng
        return (
            CircuitBreaker(key, policy.breaker, clock, rng),
            TokenBucket(policy.budget, clock),
            AdaptiveThrottle(policy.throttle, clock, rng) if policy.throttle.enabled else None,
        )

    def serve(self, hosts: HostsNow) -> None:
        """Nothing to keep in step: the guards are the state."""

    def added(self, host: Held) -> None:
        """Nothing to do."""

    def close(self) -> None:
        """Nothing held."""


def open_backend(policy: StatePolicy, clock: Clock, rng: random.Random) -> StateBackend:
    """The backend *policy* selects.

    Raises:
        ConfigError: ``state.backend`` is ``redis`` and redis-py is not installed.
    """
    if policy.backend == "memory":
        return MemoryBackend(clock, rng)
    try:
        # Imported only when selected: redis-py is an extra.
        from .redis_backend import RedisBackend
    except ImportError as missing:
        raise ConfigError(
            "state.backend: 'redis' needs redis-py, which is not installed "
            f"({missing.msg}); install the extra: pip install 'resilient-session[redis]'"
        ) from None
    return RedisBackend(policy, clock, rng)
