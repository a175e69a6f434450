"""The OpenTelemetry emitter: one CLIENT span per try sent, the try duration histogram, the
per-host gauges and the refused-try counter, all through the per-try hook seam.

Nothing here imports OpenTelemetry until a registry asks for the emitter: without
``opentelemetry-api``, or with it and no SDK configured (the API's own no-op providers), the
registry gets no emitter and its tries pay nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Final

from .hooks import TryRecord, TrySending, calls_watched
from .otel_metrics import (
    FALLBACK_ATTRIBUTE,
    ROUTE_ATTRIBUTE,
    SCOPE,
    HealthSource,
    attributes_of,
    instruments_for,
    server_of,
)

# The guard behind each refusal reason, for the span event and the counter.
GUARDS = {
    "breaker_open": "breaker",
    "throttled": "throttle",
    "concurrency_limit": "limit",
    "deadline_spent": "deadline",
    # A hedge that reached its race after another try had answered: never sent.
    "hedge_lost": "hedge",
}


# The HTTP semantic conventions' known methods: RFC 9110's and PATCH (RFC 5789). Any other is
# _OTHER in http.request.method and HTTP in the span name, so a caller's own methods make one
# metric series and one span name, not one each.
KNOWN_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
# The conventions' name for the variable that replaces the list (case-sensitive methods, comma
# separated; the list given is the whole list, not an addition to the default).
KNOWN_METHODS_VARIABLE: Final = "OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS"


def known_methods(environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The methods told as they are: KNOWN_METHODS, or the list *environ* sets instead."""
    given = environ.get(KNOWN_METHODS_VARIABLE, "")
    listed = frozenset(method.strip() for method in given.split(",") if method.strip())
    return listed or KNOWN_METHODS


def _is_api_default(provider: object) -> bool:
    # The API's own providers (no-op, or the proxy that stays no-op until an SDK is set) are
    # defined in the API's modules; any other provider records something.
    return type(provider).__module__.startswith(("opentelemetry.trace", "opentelemetry.metrics"))


def configured_providers() -> tuple[Any, Any] | None:
    """The global tracer and meter providers when OpenTelemetry imports and at least one of
    them is an SDK's (each other one as None); None otherwise."""
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return None
    tracer_provider: Any = trace.get_tracer_provider()
    meter_provider: Any = metrics.get_meter_provider()
    tracer_provider = None if _is_api_default(tracer_provider) else tracer_provider
    meter_provider = None if _is_api_default(meter_provider) else meter_provider
    if tracer_provider is None and meter_provider is None:
        return None
    return tracer_provider, meter_provider


class OpenTelemetryHook:
    """Spans and metrics for every try, on the given providers (the global ones by default).

    A registry adds one on its own when the application has configured an OpenTelemetry SDK
    before the registry is made; pass one in ``try_hooks`` to choose the providers.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from opentelemetry import metrics, trace

        tracer_provider = tracer_provider or trace.get_tracer_provider()
        meter_provider = meter_provider or metrics.get_meter_provider()
        self._tracer = tracer_provider.get_tracer(SCOPE)
        self._instruments = instruments_for(meter_provider)
        # The span of the try on its way out, and a call's last span held for on_call_end:
        # per context, so tasks sharing a thread each keep their own, as threads do.
        self._pending: ContextVar[tuple[Any, float] | None] = ContextVar(
            "resilient_session_otel_pending", default=None
        )
        self._held: ContextVar[Any] = ContextVar("resilient_session_otel_held", default=None)
        # Read once, as the SDK reads its own variables when it is set up.
        self._known = known_methods()

    def _method(self, method: str) -> str:
        return method if method in self._known else "_OTHER"

    def watch(self, health: HealthSource) -> None:
        """Report the per-host gauges of the registry behind *health* (held weakly by it)."""
        self._instruments.watch(health)

    def on_send(self, sending: TrySending, /) -> Iterator[tuple[str, str]]:
        from opentelemetry.propagate import inject

        self._end_held()
        from opentelemetry.trace import SpanKind, set_span_in_context

        address, port = server_of(sending.host)
        method = self._method(sending.method)
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.full": sending.url,
            "server.address": address,
            "server.port": port,
        }
        if sending.route is not None:
            attributes[ROUTE_ATTRIBUTE] = sending.route
        if method == "_OTHER":
            attributes["http.request.method_original"] = sending.method
        if sending.attempt > 1:
            attributes["http.request.resend_count"] = sending.attempt - 1
        # HTTP semantic conventions, "Name": an unknown method names its span HTTP.
        name = "HTTP" if method == "_OTHER" else method
        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        self._pending.set((span, time.perf_counter()))
        carrier: dict[str, str] = {}
        # The configured propagator, with this try's span as the context it names.
        inject(carrier, context=set_span_in_context(span))
        return iter(carrier.items())

    def on_try(self, record: TryRecord, /) -> None:
        pending = self._pending.get()
        if pending is not None:
            self._pending.set(None)
        address, port = server_of(record.host)
        if record.refused is not None:
            self._refused(record, address, port)
            return
        if pending is None:  # a try sent around the send stage: nothing was started for it
            return
        span, sent_at = pending
        duration = time.perf_counter() - sent_at
        # The histogram's attributes too: the method sent stays on the span alone.
        attributes: dict[str, Any] = {
            "http.request.method": self._method(record.method),
            **attributes_of(address, port, record.route),
        }
        if record.status is not None:
            attributes["http.response.status_code"] = record.status
        if record.error is not None:
            attributes["error.type"] = record.error
        elif record.status is not None and record.status >= 400:
            attributes["error.type"] = str(record.status)
        self._instruments.duration.record(duration, attributes)
        span.set_attributes(attributes)
        span.set_attributes(
            {
                "resilient_session.decision": record.decision,
                "resilient_session.reason": record.reason,
                "resilient_session.wait": record.wait,
            }
        )
        if record.hedge:
            span.set_attribute("resilient_session.hedge", True)
        if "error.type" in attributes:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR))
        if record.decision in _FINAL_FAILURES and not record.hedge and calls_watched():
            # The call's last span: kept open until on_call_end says whether a fallback
            # answered the call, which it then names.
            self._held.set(span)
            return
        span.end()

    def on_call_end(self, source: str | None, /) -> None:
        """End the call's last span, naming the fallback that answered the call, if any; with
        no span held (the call's last try was refused), the call's own span is named."""
        held = self._held.get()
        if held is not None:
            self._held.set(None)
            if source is not None:
                held.set_attribute(FALLBACK_ATTRIBUTE, source)
            held.end()
        elif source is not None:
            from opentelemetry import trace

            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute(FALLBACK_ATTRIBUTE, source)

    def _end_held(self) -> None:
        held = self._held.get()
        if held is not None:  # a call ended without on_call_end: its span ends as it was
            self._held.set(None)
            held.end()

    def _refused(self, record: TryRecord, address: str, port: int) -> None:
        from opentelemetry import trace

        guard = GUARDS.get(record.refused or "", record.refused or "")
        where = attributes_of(address, port, record.route)
        self._instruments.refused.add(1, {"resilient_session.guard": guard, **where})
        # The try sent nothing, so it is no client span: an event on the call's own span.
        span = trace.get_current_span()
        if span.is_recording():
            method = self._method(record.method)
            attributes: dict[str, Any] = {
                "resilient_session.guard": guard,
                "resilient_session.reason": record.reason,
                "resilient_session.attempt": record.attempt,
                "http.request.method": method,
                **where,
            }
            if method == "_OTHER":
                attributes["http.request.method_original"] = record.method
            span.add_event("resilient_session.try_refused", attributes)


# The decisions after which a call may be answered by a fallback.
_FINAL_FAILURES = frozenset({"give_up", "fail_fast"})


def emitter_for(health: HealthSource) -> OpenTelemetryHook | None:
    """The emitter on the global providers, watching *health*, when an SDK is configured."""
    providers = configured_providers()
    if providers is None:
        return None
    hook = OpenTelemetryHook(*providers)
    hook.watch(health)
    return hook
