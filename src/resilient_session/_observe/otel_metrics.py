"""The OpenTelemetry instruments, made once per meter provider: the try duration histogram,
the refused-try counter and the per-host gauges, which read each watched registry's health."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

SCOPE = "resilient_session"
# What a registry hands over for the gauges: its bound health(), held weakly.
HealthSource = Callable[[], Mapping[str, Any]]
# Closed 0, open 1, half-open 2, as resilience4j's state gauge numbers them.
_BREAKER_NUMBERS = {"closed": 0, "open": 1, "half_open": 2}

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
        for name, unit, description, read in _GAUGES:
            meter.create_observable_gauge(
                name, callbacks=[self._callback(read)], unit=unit, description=description
            )

    def watch(self, health: HealthSource) -> None:
        with self._lock:
            self._sources = [s for s in self._sources if s() is not None]
            self._sources.append(weakref.WeakMethod(health))

    def _callback(self, read: Callable[[Any], float | None]) -> Callable[[Any], Iterable[Any]]:
        from opentelemetry.metrics import Observation

        def observe(_options: Any) -> Iterable[Any]:
            with self._lock:
                sources = list(self._sources)
            for snapshot in live(sources):
                for key, health in snapshot.items():
                    value = read(health)
                    if value is None:
                        continue
                    # A route's state is keyed by its host key with the pattern after it.
                    route = getattr(health, "route", None)
                    address, port = server_of(key[: len(key) - len(route)] if route else key)
                    yield Observation(value, attributes_of(address, port, route))

        return observe


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
