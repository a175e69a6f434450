"""Per-host state (breaker, budget, concurrency limit, policy) in a bounded, thread-safe map,
and the state of each route of a host that has routes."""

from __future__ import annotations

import os
import random
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

from resilient_session._observe.hooks import TryHook
from resilient_session._observe.otel import OpenTelemetryHook, emitter_for
from resilient_session.clock import SYSTEM_CLOCK, Clock, jitter_source
from resilient_session.config import Config
from resilient_session.config.hostname import canonical_host
from resilient_session.config.policy import HostPolicy
from resilient_session.config.route import Route, path_of

from .backend import open_backend
from .breaker import BreakerState, CircuitBreaker
from .budget import TokenBucket
from .hedge import HedgeSnapshot, HedgeState
from .interface import Held, StateBackend, scope_key
from .limit import ConcurrencyLimit, LimitSnapshot
from .routes import RouteStates
from .runtime import Runtime, runtime_for
from .stale import StaleScope, StaleStore
from .throttle import AdaptiveThrottle, ThrottleSnapshot
from .try_table import TryTable, table_for

_DEFAULT_PORTS = {"http": 80, "https": 443}
# What health shows for a host whose throttle or concurrency limit is disabled.
_NO_THROTTLE = ThrottleSnapshot(0.0, 0, 0, 0)
_NO_LIMIT = LimitSnapshot(0, 0, 0)
_NO_HEDGING = HedgeSnapshot(0, 0, 0, None)


@dataclass(frozen=True, slots=True)
class HostState:
    """Everything kept for one ``scheme://host:port``, or for one route of it."""

    # What the state is kept under (``interface.scope_key``): the host key, or for a route
    # the host key with its pattern after it.
    key: str
    # ``scheme://host:port``, the host spelled canonically: what the events name it by.
    host: str
    # The route's pattern; None for the host's own state.
    route: str | None
    policy: HostPolicy
    breaker: CircuitBreaker
    bucket: TokenBucket
    # None when the host's throttle is disabled: the stage then costs one attribute check.
    throttle: AdaptiveThrottle | None
    # (connect, read) for a try whose caller gave no timeout, built once rather than per call.
    default_timeout: tuple[float, float]
    # None when the policy disables it: the stage then costs one attribute check.
    limit: ConcurrencyLimit | None
    # What a finished try means to decide and to each guard, by this host's statuses.
    table: TryTable
    # None when the policy does not hedge: the hedged chain then costs one attribute check.
    hedge: HedgeState | None
    # A host's routes and the state of each, when its entry has routes; None otherwise, and
    # always for a route's own state.
    routes: RouteStates[HostState] | None = None
    # Its share of the registry's stale store, and its count of fallbacks served.
    stale: StaleScope = field(default_factory=StaleScope)


@dataclass(frozen=True, slots=True)
class HostHealth:
    """A read-only view of one host, as a service's /health endpoint would show it.

    A *try* is one sent toward the upstream, admitted by every local guard. A try refused
    locally (breaker open, throttled, concurrency limit full, deadline spent: a ``fail_fast``
    event) is no try: it is counted in ``refused``. A try a hedged call cancelled (a
    ``cancelled`` event) is neither: it is counted in ``cancelled``. So ``tries`` equals the
    ``http.try`` events whose decision is neither ``fail_fast`` nor ``cancelled``, and
    ``refused`` those whose decision is ``fail_fast``.

    Attributes:
        breaker: the breaker's state now.
        open_for: seconds until an open breaker lets a probe through; 0 unless open.
        tokens: retry budget tokens left; a retry takes one whole token.
        calls: calls started (their first try), refused ones included.
        tries: tries sent toward the upstream, first tries, retries and hedges alike; a try
            cancelled because another try of its call answered first counts in ``cancelled``.
        retries: retries and hedges the budget paid a token for; one refused after its wait
            counts too.
        failures: sent tries that failed in the breaker's eyes: transport errors, timeouts, 5xx.
        refused: tries refused locally, never sent: ``rejected`` plus ``deadline_spent``
            plus ``throttled`` plus ``limited``.
        rejected: tries the breaker refused, open or out of half-open probe slots.
        deadline_spent: tries refused because the call's deadline was spent before them.
        budget_exhausted: retries not made because the budget had no whole token left.
        throttle_probability: the chance the adaptive throttle refuses the next try now; 0
            while its window holds fewer than ``min_tries`` tries, or when it is disabled.
        throttled: tries the adaptive throttle refused.
        limit: the concurrency limit now, in tries; 0 when the limit is disabled.
        in_flight: tries holding a slot of the limit now; 0 when the limit is disabled.
        limited: tries the concurrency limit refused, no slot freed within ``max_wait``.
        hedges: hedge tries the guards let through (``hedging``), cancelled ones included.
        hedge_wins: calls a hedge answered before the try it hedged.
        cancelled: tries cancelled because another try of their call answered first; neither
            a try nor a refusal.
        hedge_delay: seconds a first try may be out before a hedge follows it now; 0 when the
            host does not hedge, or ``auto`` has seen too few tries to say.
        state_backend: where the breaker, budget and throttle live: ``memory`` or ``redis``.
        state_degraded: true while the redis backend cannot reach Redis and runs on this
            process's state alone; always false for ``memory``.
        route: the pattern of the host's route whose own state this is (``hosts:`` ...
            ``routes:``); None for the host's state, which every call outside the host's
            routes shares.
        fallbacks: calls a fallback answered (``http.fallback`` events), stale or callable.
        stale_served: of those, the calls answered with a stale answer.
        stale_entries: answers the stale store keeps for the host now.
        stale_bytes: what they count against ``fallback.stale.max_bytes``.
        stale_evictions: answers of the host's dropped to make room, least recently used
            first.
    """

    breaker: BreakerState
    open_for: float
    tokens: float
    calls: int
    tries: int
    retries: int
    failures: int
    refused: int
    rejected: int
    deadline_spent: int
    budget_exhausted: int
    throttle_probability: float
    throttled: int
    limit: int
    in_flight: int
    limited: int
    hedges: int
    hedge_wins: int
    cancelled: int
    hedge_delay: float
    state_backend: str
    state_degraded: bool
    route: str | None = None
    fallbacks: int = 0
    stale_served: int = 0
    stale_entries: int = 0
    stale_bytes: int = 0
    stale_evictions: int = 0

    def as_dict(self) -> dict[str, str | int | float | bool | None]:
        """The fields as plain values, the breaker state as its string: ready for ``json.dumps``.

        Example::

            json.dumps({host: health.as_dict() for host, health in session.health().items()})
        """
        values: dict[str, str | int | float | bool | None] = {
            field.name: getattr(self, field.name) for field in fields(self)
        }
        values["breaker"] = self.breaker.value
        return values


def host_key(url: str) -> tuple[str, str, int]:
    """``(scheme://host:port, host, port)`` of *url*, with the scheme's default port filled in
    and the host spelled canonically (``config.hostname.canonical_host``: ``127.1`` is
    ``127.0.0.1``, ``API.test.`` is ``api.test``)."""
    return _key_of_origin(_origin(url))


def _origin(url: str) -> str:
    """What precedes the path, userinfo left out: every URL of one host, spelled alike,
    shares it."""
    scheme, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        # The origin keys caches that outlive the call; a password must not stay in them.
        authority = authority.rpartition("@")[2]
    return scheme + sep + authority


def _key_of_origin(origin: str) -> tuple[str, str, int]:
    cached = _KEY_CACHE.get(origin)
    if cached is None:
        if len(_KEY_CACHE) >= _KEY_CACHE_SIZE:
            _KEY_CACHE.clear()
        cached = _KEY_CACHE[origin] = _parse_host_key(origin)
    return cached


_KEY_CACHE: dict[str, tuple[str, str, int]] = {}
_KEY_CACHE_SIZE = 1024


def _parse_host_key(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    # Every spelling of one host shares its state and its rule: parsed once per origin, as
    # the cache above keeps the result.
    host = canonical_host(parts.hostname or "")
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        port = 0
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}", host, port


class HostRegistry:
    """Per-host state for one session, least recently used hosts evicted past ``max_hosts``.

    Two sessions share breakers and budgets only when handed the same registry; with the
    redis backend (``state.backend``), every registry on the same Redis and prefix shares them.
    The registry also owns what every try runs on (``runtime``: *clock*, *rng* and the names
    ``events.redact_params`` adds to the redacted ones, and the *try_hooks* told of every
    try), so each call it serves carries them.

    Raises:
        ConfigError: the ``state:`` section selects a backend that cannot be used.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        try_hooks: Iterable[TryHook] = (),
    ) -> None:
        self.config = config if config is not None else Config()
        # Seeded while resilient_session.testing.fast() is on, so its waits repeat.
        rng = rng if rng is not None else jitter_source()
        hooks = tuple(try_hooks)
        for hook in hooks:
            if isinstance(hook, OpenTelemetryHook):
                hook.watch(self.health)
        if not any(isinstance(hook, OpenTelemetryHook) for hook in hooks):
            # Decided once: an SDK configured after this registry is made is not seen by it.
            emitter = emitter_for(self.health)
            hooks += (emitter,) if emitter is not None else ()
        self.runtime: Runtime = runtime_for(self.config, clock, rng, hooks)
        self.backend: StateBackend = open_backend(
            self.config.state, clock, rng, self.runtime.states
        )
        self._max_hosts = self.config.registry.max_hosts
        # One store for every host: it holds at most the largest max_bytes the config names.
        self.stale = StaleStore(
            max(policy.fallback.stale.max_bytes for policy in self.config.policies()),
            self.runtime.clock,
        )
        self._lock = threading.Lock()
        self._hosts: OrderedDict[str, HostState] = OrderedDict()
        # The origin and state most recently moved to the end, so never the next evicted:
        # a client calling one host again finds it without parsing or locking.
        self._last: tuple[str, HostState] | None = None
        # The same state under its origin with the path's slash after it, for a caller that
        # finds it with one ``url.startswith`` and no frame (``start_call``); None while no
        # host was looked up, and always for a config with routes, whose state a path picks.
        # hot path: recent-host
        self.recent: tuple[str, HostState] | None = None
        self._routed = self.config.routed
        if self._routed:
            # Only a config with routes looks at a call's path: without, every call runs
            # exactly the lookup it ran before there were routes.
            self.for_url = self._for_url_routed  # type: ignore[method-assign]  # per instance
        self.backend.serve(self.guards)
        _live.add(self)

    def __len__(self) -> int:
        with self._lock:
            return len(self._hosts)

    def for_url(self, url: str) -> HostState:
        """The state of the host *url* points at, created on first use."""
        last = self._last
        if last is not None:
            origin, state = last
            end = len(origin)
            if url.startswith(origin) and (len(url) == end or url[end] in "/?#"):
                return state
        origin = _origin(url)
        key, host, port = _key_of_origin(origin)
        with self._lock:
            known = self._hosts.get(key)
            if known is not None:
                self._hosts.move_to_end(key)
                self._remember(origin, known)
                return known
        # Matching and building happen outside the lock; a racing thread's entry wins.
        config = self.config
        routes = config.routes_for(host, port) if self._routed else ()
        fresh = self._build(key, None, config.for_host(host, port), routes)
        with self._lock:
            state = self._hosts.setdefault(key, fresh)
            self._hosts.move_to_end(key)
            while len(self._hosts) > self._max_hosts:
                self._hosts.popitem(last=False)
            self._remember(origin, state)
        # Outside the registry's lock: no code path holds two locks.
        if state is fresh:
            self.backend.added(_held(state))
        return state

    def _remember(self, origin: str, state: HostState) -> None:
        """*state*, of *origin*, as the one the next call finds first."""
        self._last = (origin, state)
        if not self._routed:
            self.recent = (origin + "/", state)

    def _for_url_routed(self, url: str) -> HostState:
        """``for_url`` of a registry whose config has routes: the state of the route of its
        host that *url*'s path is in, else the host's."""
        state = HostRegistry.for_url(self, url)
        routes = state.routes
        if routes is None:
            return state
        route = routes.find(path_of(url))
        if route is None:
            return state
        known = routes.get(route)
        if known is not None:
            return known
        # Built outside any lock, as a host's is; a racing thread's state for the route wins.
        fresh = self._build(state.host, route.pattern, route.policy, ())
        kept = routes.keep(route, fresh)
        # Outside the route's lock: no code path holds two locks.
        if kept is fresh:
            self.backend.added(_held(kept))
        return kept

    def _build(
        self, host: str, route: str | None, policy: HostPolicy, routes: tuple[Route, ...]
    ) -> HostState:
        """Fresh state for *host* (``scheme://host:port``) or its *route*, under *policy*."""
        key = scope_key(host, route)
        breaker, bucket, throttle = self.backend.build(host, policy, route)
        return HostState(
            key,
            host,
            route,
            policy,
            breaker,
            bucket,
            throttle,
            (policy.timeout.connect, policy.timeout.read),
            ConcurrencyLimit(key, policy.limit, self.runtime.clock)
            if policy.limit.enabled
            else None,
            table_for(policy.retry),
            HedgeState(policy.hedging) if policy.hedging.enabled else None,
            RouteStates(routes) if routes else None,
        )

    def _states(self) -> list[HostState]:
        """Every host's state, each followed by its routes' (those used so far)."""
        with self._lock:
            hosts = list(self._hosts.values())
        states: list[HostState] = []
        for state in hosts:
            states.append(state)
            if state.routes is not None:
                states.extend(state.routes.states())
        return states

    def guards(self) -> list[Held]:
        """Each host's (and route's) key, policy, guards and concurrency limit now: what a
        state backend keeps in step."""
        return [_held(state) for state in self._states()]

    def after_fork(self) -> None:
        """In a forked child: fresh locks, and no concurrency-limit slot or half-open probe
        taken, for every host. The child runs only the forking thread, so a lock, slot or
        probe a parent's thread held at the fork would never be given back there."""
        self._lock = threading.Lock()
        self.stale.after_fork()
        for host in self._hosts.values():
            if host.routes is not None:
                host.routes.after_fork()
        for state in self._states():  # no other thread runs in the child to race these
            state.breaker.after_fork()
            state.bucket.after_fork()
            if state.throttle is not None:
                state.throttle.after_fork()
            if state.limit is not None:
                state.limit.after_fork()
            if state.hedge is not None:
                state.hedge.after_fork()

    def close(self) -> None:
        """Release what the state backend holds (redis: its sync thread and connections).

        The hosts' guards keep working afterwards, on this process's state alone.
        """
        self.backend.close()

    async def aclose(self) -> None:
        """:meth:`close` for a caller on an event loop (asyncio or trio), which it never
        blocks: the redis backend's close joins its sync and listener threads, which a Redis
        that does not answer can hold for a second or two, so it runs on a worker thread."""
        import anyio

        await anyio.to_thread.run_sync(self.close)

    def health(self) -> dict[str, HostHealth]:
        """A snapshot per host, most recently used last, each host followed by its routes
        used so far (keyed ``scheme://host:port/route/*``, ``HostHealth.route`` set)."""
        states = self._states()
        result = {}
        backend, degraded = self.backend.name, self.backend.degraded
        for state in states:
            breaker = state.breaker.snapshot()
            budget = state.bucket.snapshot()
            throttle = state.throttle.snapshot() if state.throttle is not None else _NO_THROTTLE
            limit = state.limit.snapshot() if state.limit is not None else _NO_LIMIT
            hedge = state.hedge.snapshot() if state.hedge is not None else _NO_HEDGING
            stale = self.stale.figures(state.stale)
            result[state.key] = HostHealth(
                breaker=breaker.state,
                open_for=breaker.open_for,
                tokens=budget.tokens,
                calls=budget.first_tries,
                tries=breaker.tries,
                retries=budget.retries,
                failures=breaker.failures,
                refused=breaker.rejected
                + breaker.refused_inside
                + throttle.throttled
                + limit.limited,
                rejected=breaker.rejected,
                # Of the guards inside it, the breaker counts the deadline's refusals only.
                deadline_spent=breaker.refused_inside,
                budget_exhausted=budget.exhausted,
                throttle_probability=throttle.probability,
                throttled=throttle.throttled,
                limit=limit.limit,
                in_flight=limit.in_flight,
                limited=limit.limited,
                hedges=hedge.hedges,
                hedge_wins=hedge.wins,
                cancelled=hedge.cancelled,
                hedge_delay=hedge.delay or 0.0,
                state_backend=backend,
                state_degraded=degraded,
                route=state.route,
                fallbacks=stale.fallbacks,
                stale_served=stale.served,
                stale_entries=stale.entries,
                stale_bytes=stale.bytes,
                stale_evictions=stale.evictions,
            )
        return result


def _held(state: HostState) -> Held:
    return state.key, state.policy, (state.breaker, state.bucket, state.throttle), state.limit


_live: weakref.WeakSet[HostRegistry] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for registry in list(_live):
        registry.after_fork()


if hasattr(os, "register_at_fork"):
    # Registered when this module is first imported, which the package's own import does
    # before the redis backend can register its hook: hooks run in the child in registration
    # order, so every lock here is fresh before a backend's new sync thread can take one.
    os.register_at_fork(after_in_child=_after_fork_in_child)
