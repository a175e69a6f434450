"""Every try visible: one CLIENT span per try sent, its traceparent on the wire, the duration
histogram and gauges, and a refused try as an event on the caller's span (loopback, real SDK)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import requests
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from resilient_session import CircuitOpenError, OpenTelemetryHook, ResilientSession
from resilient_session.testing import FlakyUpstream, Reply, fast

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-t0ken"  # noqa: S105 - planted, to be found nowhere


class Otel:
    """An SDK of the test's own: spans kept in memory, metrics read on demand."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("test")

    def session(self, config: dict[str, Any] | None = None) -> ResilientSession:
        hook = OpenTelemetryHook(self.tracer_provider, self.meter_provider)
        return ResilientSession(config, try_hooks=[hook])

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def otel() -> Iterator[Otel]:
    with fast():
        yield Otel()


def _traceparent(headers: Sequence[tuple[str, str]]) -> str:
    values = [value for name, value in headers if name.lower() == "traceparent"]
    assert len(values) == 1, headers
    return values[0]


def test_three_tries_are_three_sibling_client_spans(otel: Otel) -> None:
    """503, 503, 200 under a parent: three GET spans under it, their ids on the wire."""
    with FlakyUpstream() as up:
        up.script("/items", Reply(503), Reply(503), Reply(200, body=b"ok"))
        url = up.url("/items").replace("http://", f"http://user:{SECRET}@") + f"?token={SECRET}"
        with otel.session() as session, otel.tracer.start_as_current_span("parent") as parent:
            assert session.get(url).status_code == 200
        received = up.received("/items")
        port = up.port
    spans = [s for s in otel.finished() if s.name != "parent"]
    assert [s.name for s in spans] == ["GET", "GET", "GET"]
    assert all(s.kind is SpanKind.CLIENT for s in spans)
    parent_id = parent.get_span_context().span_id
    assert [s.parent.span_id if s.parent else None for s in spans] == [parent_id] * 3
    attributes = [dict(s.attributes or {}) for s in spans]
    assert [a["http.response.status_code"] for a in attributes] == [503, 503, 200]
    assert [a.get("error.type") for a in attributes] == ["503", "503", None]
    assert [a.get("http.request.resend_count") for a in attributes] == [None, 1, 2]
    assert [a["resilient_session.decision"] for a in attributes] == ["retry", "retry", "success"]
    assert [a["resilient_session.reason"] for a in attributes] == ["overload", "overload", "ok"]
    assert attributes[2]["resilient_session.wait"] == 0.0
    assert {(a["server.address"], a["server.port"]) for a in attributes} == {("127.0.0.1", port)}
    assert attributes[0]["url.full"] == f"http://127.0.0.1:{port}/items?token=REDACTED"
    assert not any(SECRET in str(v) for a in attributes for v in a.values())
    # version-trace id-span id-flags; the flags say "sampled" (and, lately, "random").
    assert [_traceparent(hit.headers).split("-")[1:3] for hit in received] == [
        [f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"] for s in spans
    ]
    durations = otel.points("http.client.request.duration")
    assert sum(p.count for p in durations) == 3
    assert sorted((p.attributes.get("http.response.status_code"), p.count) for p in durations) == [
        (200, 1),
        (503, 2),
    ]


def test_a_refused_connection_is_a_span_with_its_error_type(otel: Otel) -> None:
    """A port nobody listens on: each try is a span whose error.type names the exception."""
    with FlakyUpstream() as up:
        url = up.url("/gone")
    config = {"defaults": {"retry": {"max_attempts": 2}}}
    with otel.session(config) as session, pytest.raises(requests.ConnectionError) as raised:
        session.get(url)
    spans = otel.finished()
    assert len(spans) == 2
    assert {dict(s.attributes or {}).get("error.type") for s in spans} == {
        type(raised.value).__name__
    }
    assert all("http.response.status_code" not in (s.attributes or {}) for s in spans)


def test_a_refused_try_is_an_event_on_the_callers_span(otel: Otel) -> None:
    """With the breaker open, the call sends nothing: no client span, one event on the parent."""
    config = {"defaults": {"breaker": {"failure_threshold": 1}, "retry": {"max_attempts": 1}}}
    with FlakyUpstream() as up:
        up.script("/down", Reply(500))
        with otel.session(config) as session:
            assert session.get(up.url("/down")).status_code == 500
            with otel.tracer.start_as_current_span("parent"), pytest.raises(CircuitOpenError):
                session.get(up.url("/down"))
        assert len(up.received("/down")) == 1
    spans = otel.finished()
    assert [s.name for s in spans] == ["GET", "parent"]
    events = list(spans[1].events)
    assert [e.name for e in events] == ["resilient_session.try_refused"]
    assert dict(events[0].attributes or {})["resilient_session.guard"] == "breaker"
    assert dict(events[0].attributes or {})["resilient_session.reason"] == "breaker_open"
    refused = otel.points("resilient_session.tries.refused")
    assert [(p.attributes["resilient_session.guard"], p.value) for p in refused] == [("breaker", 1)]
    breaker = otel.points("resilient_session.breaker.state")
    assert [p.value for p in breaker] == [1]


def test_under_the_requests_instrumentation_the_call_span_parents_the_tries(otel: Otel) -> None:
    """The instrumentation's span for the call and our three tries: four spans, one trace."""
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    instrumentor = RequestsInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    try:
        with FlakyUpstream() as up:
            up.script("/items", Reply(503), Reply(503), Reply(200, body=b"ok"))
            with otel.session() as session:
                assert session.get(up.url("/items")).status_code == 200
            received = up.received("/items")
    finally:
        instrumentor.uninstrument()
    spans = otel.finished()
    assert len(spans) == 4
    call = spans[-1]
    tries = spans[:-1]
    assert call.parent is None
    assert [s.parent.span_id if s.parent else None for s in tries] == [call.context.span_id] * 3
    assert [_traceparent(hit.headers).split("-")[2] for hit in received] == [
        f"{s.context.span_id:016x}" for s in tries
    ]


_NOTHING_CHANGES = """
import sys
{block}
import structlog
from resilient_session import ResilientSession
from resilient_session.testing import FlakyUpstream, Reply, fast
with fast(), FlakyUpstream() as up:
    up.script("/items", Reply(503), Reply(200))
    session = ResilientSession()
    assert session.get(up.url("/items")).status_code == 200
    hooks = session.registry.runtime.hooks
    headers = [name.lower() for name, _ in up.received("/items")[1].headers]
print(len(hooks), "traceparent" in headers, "opentelemetry.sdk" in sys.modules)
"""


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("", "0 False False"),
        ("sys.modules['opentelemetry'] = None", "0 False False"),
    ],
    ids=["api-without-sdk", "no-api"],
)
def test_without_an_sdk_nothing_changes(block: str, expected: str) -> None:
    """The API alone, or no API at all: no hook, no header, no SDK loaded."""
    done = subprocess.run(  # noqa: S603 - this interpreter, the test's own code
        [sys.executable, "-c", _NOTHING_CHANGES.format(block=block)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == expected


def test_a_configured_sdk_is_found_by_a_new_session() -> None:
    """With global providers set before the session is made, its tries become spans."""
    code = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
from resilient_session import ResilientSession
from resilient_session.testing import FlakyUpstream, Reply, fast
with fast(), FlakyUpstream() as up:
    up.script("/items", Reply(503), Reply(200))
    ResilientSession().get(up.url("/items"))
print([s.name for s in exporter.get_finished_spans()])
"""
    done = subprocess.run(  # noqa: S603 - this interpreter, the test's own code
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['GET', 'GET']"


def test_the_package_import_imports_no_opentelemetry() -> None:
    """Importing the package imports no OpenTelemetry module at all."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, resilient_session; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_gauges_read_each_hosts_health(otel: Otel) -> None:
    """Breaker state, throttle chance, limit, in flight and tokens: one point per host each,
    equal to the session's health, and none once the session is gone."""
    config = {"defaults": {"limit": {"enabled": True}}}
    with FlakyUpstream() as up, otel.session(config) as session:
        assert session.get(up.url("/a")).status_code == 200
        health = next(iter(session.health().values()))
        expected = {
            "resilient_session.breaker.state": 0,
            "resilient_session.throttle.refusal_chance": health.throttle_probability,
            "resilient_session.limit": health.limit,
            "resilient_session.in_flight": 0,
            "resilient_session.budget.tokens": health.tokens,
        }
        seen = {}
        for name in expected:
            points = otel.points(name)
            assert [
                (p.attributes["server.address"], p.attributes["server.port"]) for p in points
            ] == [("127.0.0.1", up.port)]
            seen[name] = points[0].value
        assert seen == expected
        assert health.limit is not None
        assert health.limit > 0
    del session
    gc.collect()
    assert otel.points("resilient_session.budget.tokens") == []


@pytest.fixture(params=["", "http", "http/dup"], ids=["default", "stable", "dup"])
def semconv(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    """The instrumentation's semantic conventions opt-in, read afresh; the URL keys it writes.
    An instrumentation older than the opt-in (0.41b0, what the otel floor installs) writes
    ``http.url`` alone."""
    try:
        from opentelemetry.instrumentation._semconv import (
            _OpenTelemetrySemanticConventionStability as Stability,
        )
    except ImportError:
        if request.param:
            pytest.skip("this opentelemetry-instrumentation predates the semconv opt-in")
        return ("http.url",)
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", request.param)
    # It reads the variable once per process: let this test's value be read, then the old
    # mapping comes back with the attributes.
    monkeypatch.setattr(Stability, "_initialized", False)
    monkeypatch.setattr(Stability, "_OTEL_SEMCONV_STABILITY_SIGNAL_MAPPING", {})
    return {"": ("http.url",), "http": ("url.full",), "http/dup": ("url.full", "http.url")}[
        request.param
    ]


def _instrumented(otel: Otel, **hooks: Any) -> Any:
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    instrumentor = RequestsInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider, **hooks)
    return instrumentor


def _ours(span: ReadableSpan) -> bool:
    scope = span.instrumentation_scope
    return scope is not None and scope.name == "resilient_session"


def _values(span: ReadableSpan) -> str:
    return " ".join(str(value) for value in (span.attributes or {}).values())


def test_the_redacting_hook_clears_the_instrumentations_span(
    otel: Otel, semconv: tuple[str, ...]
) -> None:
    """Under the requests instrumentation with redacting_request_hook, the call's span has
    the URL the tries' spans have: no userinfo, no fragment, token= and a configured name
    hidden, in whichever keys the conventions write; the three tries still parent on it."""
    from resilient_session import redacting_request_hook

    config = {"events": {"redact_params": ["tenant"]}}
    session = otel.session(config)
    instrumentor = _instrumented(
        otel, request_hook=redacting_request_hook(session.config.events.redact_params)
    )
    try:
        with FlakyUpstream() as up:
            up.script("/items", Reply(503), Reply(503), Reply(200, body=b"ok"))
            url = up.url("/items").replace("http://", f"http://user:{SECRET}@")
            with session:
                response = session.get(f"{url}?token={SECRET}&tenant={SECRET}&page=2#{SECRET}")
            received = up.received("/items")
            expected = up.url("/items") + "?token=REDACTED&tenant=REDACTED&page=2"
    finally:
        instrumentor.uninstrument()
    assert response.status_code == 200
    assert len(received) == 3
    spans = otel.finished()
    call = [s for s in spans if not _ours(s)]
    tries = [s for s in spans if _ours(s)]
    assert (len(call), len(tries)) == (1, 3)
    written = {key: value for key, value in (call[0].attributes or {}).items() if "url" in key}
    assert written == dict.fromkeys(semconv, expected)
    assert [(s.attributes or {})["url.full"] for s in tries] == [expected] * 3
    assert [s.parent.span_id if s.parent else None for s in tries] == [call[0].context.span_id] * 3
    assert [SECRET in _values(s) for s in spans] == [False] * 4


def test_the_redacting_hook_clears_every_redirect_hops_span(
    otel: Otel, semconv: tuple[str, ...]
) -> None:
    """A redirect to a URL with a secret: the instrumentation's one span for the call (its
    hops run inside it) has the first URL redacted, each hop's try span its own, and no span
    keeps a secret or the fragment."""
    from resilient_session import redacting_request_hook

    session = otel.session()
    instrumentor = _instrumented(otel, request_hook=redacting_request_hook())
    try:
        with FlakyUpstream() as up:
            target = up.url("/to") + f"?sig={SECRET}"
            up.script("/from", Reply(302, headers={"Location": target + f"#{SECRET}"}))
            up.script("/to", Reply(200, body=b"ok"))
            with session:
                response = session.get(up.url("/from") + f"?code={SECRET}")
            hops = [up.url("/from") + "?code=REDACTED", up.url("/to") + "?sig=REDACTED"]
    finally:
        instrumentor.uninstrument()
    assert (response.status_code, response.url) == (200, target + f"#{SECRET}")
    spans = otel.finished()
    calls = [s for s in spans if not _ours(s)]
    tries = [s for s in spans if _ours(s)]
    assert [{k: v for k, v in (s.attributes or {}).items() if "url" in k} for s in calls] == [
        dict.fromkeys(semconv, hops[0])
    ]
    assert [(s.attributes or {})["url.full"] for s in tries] == hops
    assert [SECRET in _values(s) for s in spans] == [False] * 3


def test_a_routes_spans_metrics_and_gauges_carry_the_route(otel: Otel) -> None:
    """A try under a route is a span with resilient_session.route, its duration and its
    refusals are counted with it, and its state is one more set of gauges, on the host's
    server.address and port; a try outside every route carries no route attribute."""
    config = {
        "defaults": {"retry": {"max_attempts": 1}},
        "hosts": {"127.0.0.1": {"routes": {"/bad/*": {"breaker": {"failure_threshold": 1}}}}},
    }
    with FlakyUpstream() as up, otel.session(config) as session:
        up.script("/bad/1", Reply(500))
        assert session.get(up.url("/bad/1")).status_code == 500
        with pytest.raises(CircuitOpenError):
            session.get(up.url("/bad/2"))
        assert session.get(up.url("/good")).status_code == 200
        port = up.port
        spans = otel.finished()
        assert [dict(s.attributes or {}).get("resilient_session.route") for s in spans] == [
            "/bad/*",
            None,
        ]
        durations = otel.points("http.client.request.duration")
        assert sorted(
            (dict(p.attributes).get("resilient_session.route") or "", p.count) for p in durations
        ) == [("", 1), ("/bad/*", 1)]
        refused = otel.points("resilient_session.tries.refused")
        assert [dict(p.attributes) for p in refused] == [
            {
                "resilient_session.guard": "breaker",
                "server.address": "127.0.0.1",
                "server.port": port,
                "resilient_session.route": "/bad/*",
            }
        ]
        gauges = otel.points("resilient_session.breaker.state")
        assert sorted(
            (
                p.attributes["server.address"],
                p.attributes["server.port"],
                p.attributes.get("resilient_session.route", ""),
                p.value,
            )
            for p in gauges
        ) == [("127.0.0.1", port, "", 0), ("127.0.0.1", port, "/bad/*", 1)]


KNOWN = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH")


def _methods_and_names(spans: Sequence[ReadableSpan]) -> list[tuple[str, Any, Any]]:
    return [
        (
            s.name,
            (s.attributes or {}).get("http.request.method"),
            (s.attributes or {}).get("http.request.method_original"),
        )
        for s in spans
    ]


def test_known_methods_name_their_spans_as_they_are(otel: Otel) -> None:
    """GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, PATCH: the span name and
    http.request.method are the method, with no http.request.method_original."""
    with FlakyUpstream() as up, otel.session() as session:
        for method in KNOWN:
            session.request(method, up.url("/m"))
    spans = otel.finished()
    assert _methods_and_names(spans) == [(method, method, None) for method in KNOWN]
    durations = otel.points("http.client.request.duration")
    assert sorted(p.attributes["http.request.method"] for p in durations) == sorted(KNOWN)


def test_300_other_methods_are_one_series_and_spans_named_http(otel: Otel) -> None:
    """300 methods of the caller's own: each span is named HTTP with http.request.method
    _OTHER and the method sent in http.request.method_original; the duration histogram has
    one series for all of them, beside GET's."""
    others = [f"X-VERB-{index}" for index in range(300)]
    # 300 answers of 501 in a row: no breaker opening or throttling between them.
    config = {"defaults": {"breaker": {"failure_threshold": 1000}, "throttle": {"enabled": False}}}
    with FlakyUpstream() as up, otel.session(config) as session:
        statuses = [session.request(method, up.url("/m")).status_code for method in others]
        assert session.get(up.url("/m")).status_code == 200
    assert statuses == [501] * 300  # each sent once: the upstream knows none, and says so
    spans = otel.finished()
    assert _methods_and_names(spans) == [
        *(("HTTP", "_OTHER", method) for method in others),
        ("GET", "GET", None),
    ]
    durations = otel.points("http.client.request.duration")
    series = sorted((p.attributes["http.request.method"], p.count) for p in durations)
    assert series == [("GET", 1), ("_OTHER", 300)]
    assert not any("http.request.method_original" in p.attributes for p in durations)


def test_a_refused_try_of_another_method_is_told_as_other(otel: Otel) -> None:
    """A try of the caller's own method refused by the breaker a 501 opened: its event on the
    call's span carries _OTHER and the method sent."""
    config = {"defaults": {"breaker": {"failure_threshold": 1}, "retry": {"max_attempts": 1}}}
    with FlakyUpstream() as up, otel.session(config) as session:
        assert session.request("PURGE", up.url("/down")).status_code == 501
        with otel.tracer.start_as_current_span("parent"), pytest.raises(CircuitOpenError):
            session.request("PURGE", up.url("/down"))
    spans = otel.finished()
    assert _methods_and_names(spans) == [("HTTP", "_OTHER", "PURGE"), ("parent", None, None)]
    (event,) = spans[1].events
    assert (
        dict(event.attributes or {})["http.request.method"],
        dict(event.attributes or {})["http.request.method_original"],
    ) == ("_OTHER", "PURGE")


def test_the_known_methods_can_be_replaced_from_the_environment(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS replaces the list, as the conventions ask: with
    "PURGE,GET", PURGE is a method as it is and POST is _OTHER."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS", "PURGE, GET")
    with FlakyUpstream() as up, otel.session() as session:
        for method in ("PURGE", "GET", "POST"):
            session.request(method, up.url("/m"))
    assert _methods_and_names(otel.finished()) == [
        ("PURGE", "PURGE", None),
        ("GET", "GET", None),
        ("HTTP", "_OTHER", "POST"),
    ]


def test_a_call_a_fallback_answers_names_it_on_its_last_span(otel, upstream):
    """Two tries sent, both 503, the call answered stale: two CLIENT spans, the last one with
    resilient_session.fallback = stale, the first without; a call no fallback answers ends
    its last span with no such attribute."""
    upstream.script("/s", Reply(200, body=b"kept"), Reply(503))
    config = {
        "defaults": {
            "retry": {"max_attempts": 2, "backoff_base": 0.01, "backoff_cap": 0.01},
            "fallback": {"stale": {"enabled": True}},
        }
    }
    session = otel.session(config)
    session.get(upstream.url("/s"))
    served = session.get(upstream.url("/s"))
    session.get(upstream.url("/s"), resilience={"fallback": {"stale": {"enabled": False}}})
    assert served.content == b"kept"
    spans = otel.finished()
    assert len(spans) == 5
    marks = [(span.attributes or {}).get("resilient_session.fallback") for span in spans]
    assert marks == [None, None, "stale", None, None]
    assert [(span.attributes or {}).get("http.response.status_code") for span in spans] == [
        200, 503, 503, 503, 503,
    ]  # fmt: skip
