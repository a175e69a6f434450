"""The interface of a state backend: the guards it builds for a host and what it keeps in
step; the memory backend and the fleet backend both implement it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from resilient_session.config.policy import HostPolicy

from .breaker import CircuitBreaker
from .budget import TokenBucket
from .limit import ConcurrencyLimit
from .throttle import AdaptiveThrottle


def scope_key(host: str, route: str | None) -> str:
    """The key of the state of *host* (``scheme://host:port``), or of one of its routes: the
    host key with the route's pattern after it (``https://api.example.com:443/search/*``).
    What the registry, ``health()`` and a fleet's Redis keys name a state by."""
    return host if route is None else host + route


# A host's guards, as a backend builds them: the throttle is None when the policy disables it.
Guards = tuple[CircuitBreaker, TokenBucket, AdaptiveThrottle | None]
# One host, or one route of a host, as the registry holds it: its key (``scope_key``), policy
# and guards, and its concurrency limit (None when disabled), whose tries in flight say the
# host is in use.
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

    def build(self, key: str, policy: HostPolicy, route: str | None = None) -> Guards:
        """Fresh guards for host *key* (``scheme://host:port``), or for its *route*: kept
        under ``scope_key(key, route)``."""

    def serve(self, hosts: HostsNow) -> None:
        """Keep in step, from now on, the guards *hosts* returns at each moment: exactly the
        registry's, evictions and races included, with no list of its own to drift."""

    def added(self, host: Held) -> None:
        """The registry just made *host*'s guards (and may have evicted another host's): a
        chance to bring them in step soon."""

    def close(self) -> None:
        """Release what the backend holds (a thread, connections); the guards keep working
        on local state."""
