"""The OpenTelemetry instruments, made once per meter provider: the try duration histogram,
the refused-try counter and the per-host gauges, which read each watched registry's health.

The SDK calls each gauge's callback in turn on every collection; the five share one reading
of the registries (one ``health()`` walk a collection, not five): the first gauge a collection
calls takes it, and each other gauge uses it once. Nothing is locked while the hosts are
walked, and every hundred hosts the collection hands the interpreter to any thread waiting
for it, so calls never wait for a collection: with 10,000 hosts a collection is seconds of
Python work, and a call that needs the GIL back after each socket read would otherwise wait
the switch interval (5 ms) each time.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from resilient_session.clock import let_others_run

SCOPE = "resilient_session"
# What a registry hands over for the gauges: its bound health(), held weakly.
HealthSource = Callable[[], Mapping[str, Any]]
# Closed 0, open 1, half-open 2, as resilience4j's state gauge numbers them.
_BREAKER_NUMBERS = {"closed": 0, "open": 1, "half_open": 2}
# Hosts read or observed between two hand-overs of the interpreter: about a millisecond.
_PIECE: Final = 100
# One host's gauge attributes and its five values, in _GAUGES' order (None: no point).
_Row = tuple[dict[str, Any], tuple[float | None, ...]]

# (name, unit, description, the value read from a host's health)
_GAUGES: tuple[tuple[str, str, str, Callable[[Any], float | None]], ...] = (
    (
        "resilient_session.breaker.state",
        "1",
        "The host's circuit breaker: 0 closed, 1 open, 2 half-open.",
        lambda h: _BREAKER_NUMBERS.get(getattr(h.breaker, "value", h.breaker)),
    ),
    (
        "resilient_session.throttle.refusal_chance",
        "1",
        "The chance that the host's adaptive throttle refuses a try.",
        lambda h: h.throttle_probability,
    ),
    (
        "resilient_session.limit",
        "{try}",
        "The host's adaptive concurrency limit.",
        lambda h: h.limit,
    ),
    (
        "resilient_session.in_flight",
        "{try}",
        "Tries to the host in flight under its concurrency limit.",
        lambda h: h.in_flight,
    ),
    (
        "resilient_session.budget.tokens",
        "{token}",
        "Retry tokens left in the host's budget.",
        lambda h: h.tokens,
    ),
)


class Instruments:
    """What one meter provider records into, and the registries its gauges read."""

    def __init__(self, meter_provider: Any) -> None:
        meter = meter_provider.get_meter(SCOPE)
        self.duration = meter.create_histogram(
            "http.client.request.duration", unit="s", description="Duration of each try sent."
        )
        self.refused = meter.create_counter(
            "resilient_session.tries.refused",
            unit="{try}",
            description="Tries refused locally, by the guard that refused them.",
        )
        self._sources: list[weakref.WeakMethod[Any]] = []
        self._lock = threading.Lock()
        # The latest reading, and the gauges that have not used it yet.
        self._rows: list[_Row] = []
        self._unread: set[int] = set()
        for index, (name, unit, description, _read) in enumerate(_GAUGES):
            meter.create_observable_gauge(
                name, callbacks=[self._callback(index)], unit=unit, description=description
            )

    def watch(self, health: HealthSource) -> None:
        with self._lock:
            self._sources = [s for s in self._sources if s() is not None]
            self._sources.append(weakref.WeakMethod(health))

    def _callback(self, gauge: int) -> Callable[[Any], Iterable[Any]]:
        from opentelemetry.metrics import Observation

        def observe(_options: Any) -> Iterable[Any]:
            # A generator: the SDK takes in each point as it comes, so the hand-overs fall
            # between pieces of its work too.
            for count, (attributes, values) in enumerate(self._reading_for(gauge), 1):
                value = values[gauge]
                if value is not None:
                    yield Observation(value, attributes)
                if not count % _PIECE:
                    let_others_run()

        return observe

    def _reading_for(self, gauge: int) -> list[_Row]:
        """The rows of this collection's reading for *gauge*: the one another gauge took, if
        *gauge* has not used it yet, else a new one (*gauge* is the first of a collection).

        The SDK calls the five gauges of the one meter together, in the order they were
        made, on every collection: the first always finds it has used the latest reading
        and takes a new one, so no reading serves two collections.
        """
        with self._lock:
            if gauge in self._unread:
                rows = self._rows
                self._unread.discard(gauge)
                if not self._unread:
                    self._rows = []  # every gauge has it: hold no reading between collections
                return rows
            sources = list(self._sources)
        rows = _read(sources)  # unlocked: the walk takes each guard's lock on its own
        with self._lock:
            self._rows = rows
            self._unread = set(range(len(_GAUGES)))
            self._unread.discard(gauge)
        return rows


def _read(sources: Iterable[weakref.WeakMethod[Any]]) -> list[_Row]:
    """One walk over the hosts of every live registry among *sources*: each host's attributes,
    made once for the five gauges, and its five values."""
    rows = []
    for snapshot in live(sources):
        let_others_run()  # each health() is one piece: about 10 µs a host
        for host, health in snapshot.items():
            # A route's state is keyed by its host key with the pattern after it.
            route = getattr(health, "route", None)
            address, port = server_of(host[: len(host) - len(route)] if route else host)
            values = tuple(read(health) for _name, _unit, _description, read in _GAUGES)
            rows.append((attributes_of(address, port, route), values))
            if not len(rows) % _PIECE:
                let_others_run()
    return rows


_made: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()
_made_lock = threading.Lock()


def instruments_for(meter_provider: Any) -> Instruments:
    """The instruments of *meter_provider*, made on first use: an instrument made twice under
    one name would be reported once, with one registry's gauges."""
    with _made_lock:
        made = _made.get(meter_provider)
        if made is None:
            made = _made[meter_provider] = Instruments(meter_provider)
        return made


ROUTE_ATTRIBUTE = "resilient_session.route"
# On the last span of a call a fallback answered: its source, ``stale`` or ``callable``.
FALLBACK_ATTRIBUTE = "resilient_session.fallback"


def attributes_of(address: str, port: int, route: str | None) -> dict[str, Any]:
    """``server.address`` and ``server.port``, and the route's pattern for a try or state of
    a route (``hosts:`` ... ``routes:``): a configured, bounded set, so no new series beyond
    the routes a config names."""
    attributes: dict[str, Any] = {"server.address": address, "server.port": port}
    if route is not None:
        attributes[ROUTE_ATTRIBUTE] = route
    return attributes


def server_of(host: str) -> tuple[str, int]:
    """``server.address`` and ``server.port`` of a host key, ``scheme://host:port``."""
    rest = host.split("://", 1)[-1]
    address, _, port = rest.rpartition(":")
    return address.strip("[]"), int(port) if port.isdigit() else 0


def live(sources: Iterable[weakref.WeakMethod[Any]]) -> Iterator[Mapping[str, Any]]:
    """The health snapshot of every registry still alive among *sources*."""
    for source in sources:
        health = source()
        if health is not None:
            yield health()
