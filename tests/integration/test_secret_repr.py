"""No ``repr`` or ``str`` of a public object shows a password, a token or a URL's userinfo.

Every public class of ``resilient_session``, ``.config``, ``.inbound`` and ``.testing`` is
built with secrets planted where a value can hold them (the store's URL, the URL of a call),
then its ``repr`` and ``str`` are scanned, and so are those of everything it holds: the fields
of config objects, the items of containers, the attributes of the library's own objects. A
string is scanned as part of its holder, never alone: the store's URL has to be kept whole to
connect with.
"""

from __future__ import annotations

import contextvars
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import requests
import yaml
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

import resilient_session
from resilient_session import ResilientSession, config, inbound, testing
from resilient_session._pipeline.attempt import Outcome
from resilient_session._pipeline.hedging.race import Race
from resilient_session.testing import FakeClock, FlakyUpstream, Reply

pytestmark = pytest.mark.integration

SECRETS = ("S3cretPW", "user-S3cret", "tok-S3cret")
NAMESPACES = (resilient_session, config, inbound, testing)
MAX_DEPTH = 8
# What a loopback upstream received, as it received it: a test reads a Hit to see exactly
# what went on the wire (the token a call sent included), so it is not scanned.
RECEIVED = testing.Hit


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


STORE_URL = f"redis://user-S3cret:S3cretPW@127.0.0.1:{_closed_port()}/0?password=tok-S3cret"


def _leaks(root: object, name: str) -> Iterator[str]:
    """``where: text`` for each repr or str under *root* that holds a secret."""
    seen: set[int] = set()
    stack: list[tuple[object, str, int]] = [(root, name, 0)]
    while stack:
        value, where, depth = stack.pop()
        if id(value) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(value))
        if isinstance(value, str | bytes | int | float | type(None) | RECEIVED):
            continue
        for text in (repr(value), str(value)):
            if any(secret in text for secret in SECRETS):
                yield f"{where}: {text[:300]}"
        stack.extend((child, f"{where}.{key}", depth + 1) for key, child in _children(value))


def _children(value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            yield field, getattr(value, field)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield f"[{key!r}]", key
            yield f"[{key!r}]", item
    elif isinstance(value, list | tuple | set | frozenset):
        yield from ((f"[{index}]", item) for index, item in enumerate(value))
    elif type(value).__module__.startswith("resilient_session") and hasattr(value, "__dict__"):
        for key, item in vars(value).items():
            # The exception a library exception replaced is kept unredacted on purpose
            # (docs/events.md, "Redaction"): it is set apart, as its docstring says.
            if key != "original" and not (isinstance(value, FlakyUpstream) and key == "_hits"):
                yield key, item


def _configured(tmp_path: Path, **sections: Any) -> Path:
    document = {
        "defaults": {"retry": {"max_attempts": 1}},
        "hosts": {"127.0.0.1": {"breaker": {"failure_threshold": 50}}},
        "state": {"url": STORE_URL, "timeout_ms": 50, **sections},
    }
    path = tmp_path / "resilient.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _refusals(harness: Callable[..., Any], url: str) -> Iterator[BaseException]:
    """The four refusals, each raised by the stage that raises it, for a call to *url*."""
    fails = {"retry": {"max_attempts": 1}}
    breaker = harness({"defaults": {**fails, "breaker": {"failure_threshold": 1}}})
    breaker.run(500, url=url)
    yield breaker.run(200, url=url)[0].error
    throttle = harness({"defaults": {**fails, "throttle": {"min_tries": 1, "k": 1}}})
    for _ in range(200):  # the refusal chance nears 1 as failed tries add up
        error = throttle.run(503, url=url)[0].error
        if error is not None:
            yield error
            break
    one_slot = {"initial": 1, "min": 1, "max": 1, "initial_burst": 1, "max_wait": 0}
    limit = harness({"defaults": {"limit": one_slot}})
    assert limit.host(url).limit.acquire(None)
    yield limit.run(200, url=url)[0].error
    # A read the deadline cut short: the deadline stage turns its timeout into the deadline's.
    yield harness().run(requests.ReadTimeout, url=url, deadline=1.0, timeout=5.0)[0].error
    # A try of a hedged call that lost its race, as the race tells it.
    hedged = harness({"defaults": {"hedging": {"enabled": True}}})
    lost = hedged.first_attempt(url=url)
    call = lost.call
    assert call.state.hedge is not None
    race = Race(call, call.state.hedge, lambda attempt: Outcome(), contextvars.copy_context())
    race.close()
    cancelled = race.cancelled(lost).error
    assert cancelled is not None
    yield cancelled


async def _asgi_app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI application that is never called: the middleware is built, not served."""


class _Spy:
    """A send hook and backend hook that keeps what it is told: the records scanned below."""

    def __init__(self) -> None:
        self.records: list[resilient_session.TryRecord] = []
        self.sending: list[resilient_session.TrySending] = []
        self.states: list[resilient_session.BackendChange] = []

    def on_transition(self, change: resilient_session.StateChange, /) -> None:
        """Breaker changes are not scanned: the host key holds no secret."""

    def on_state(self, change: resilient_session.BackendChange, /) -> None:
        self.states.append(change)

    def on_send(self, sending: resilient_session.TrySending, /) -> list[tuple[str, str]]:
        self.sending.append(sending)
        return []

    def on_try(self, record: resilient_session.TryRecord, /) -> None:
        self.records.append(record)


@contextmanager
def _instances(
    tmp_path: Path, harness: Callable[..., Any], upstream: FlakyUpstream
) -> Iterator[dict[str, object]]:
    """One live instance of each public class, with secrets planted, by name."""
    url = upstream.url("/items?page=2&token=tok-S3cret").replace(
        "http://", "http://user-S3cret:S3cretPW@"
    )
    loaded = config.load(_configured(tmp_path))
    spy = _Spy()
    otel = resilient_session.OpenTelemetryHook(TracerProvider(), MeterProvider())
    session = ResilientSession(_configured(tmp_path, backend="redis"), try_hooks=[spy, otel])
    assert session.get(url).status_code == 200
    try:
        config.load({"state": {"url": "http://user-S3cret:S3cretPW@x/?token=tok-S3cret"}})
    except resilient_session.ConfigError as exc:
        config_error = exc
    upstream.script("/big", Reply(200, body=b"too large"))
    with ResilientSession({"defaults": {"retry": {"max_response_bytes": 1}}}) as capped:
        try:
            capped.get(url.replace("/items", "/big"))
        except resilient_session.ResponseTooLarge as exc:
            too_large = exc
    # The store's port is closed: within a few syncs the backend reports itself degraded.
    for _ in range(600):
        if spy.states:
            break
        resilient_session.SYSTEM_CLOCK.sleep(0.005)
    # The sentinels' password, planted in a sentinel-mode config and a session built on it.
    sentinel_state = {
        "mode": "sentinel",
        "sentinels": [["127.0.0.1", _closed_port()]],
        "service_name": "fleet",
        "sentinel_password": SECRETS[0],
    }
    sentinel_loaded = config.load(_configured(tmp_path, **sentinel_state))
    sentinel_session = ResilientSession(_configured(tmp_path, backend="redis", **sentinel_state))
    # What a fallback is told of a call that failed, and the mark on the answer it served: a
    # call to the same URL (its token, its userinfo) on a port that refuses the connection.
    told: list[resilient_session.FailedCall] = []

    def stand_in(failed: resilient_session.FailedCall) -> requests.Response:
        told.append(failed)
        served = requests.Response()
        served.status_code = 200
        return served

    refused_url = url.replace(f":{upstream.port}/", f":{_closed_port()}/")
    with ResilientSession({"defaults": {"retry": {"max_attempts": 1}}}, fallback=stand_in) as down:
        fallback_info = resilient_session.fallback_of(down.get(refused_url))
    clock = FakeClock()
    health = session.health()
    built: dict[str, object] = {
        "Config(sentinel)": sentinel_loaded,
        "ResilientSession(sentinel)": sentinel_session,
        "Config": loaded,
        "ConfigDocument": config.ConfigDocument(state=loaded.state),
        "StatePolicy": loaded.state,
        "ResilientSession": session,
        "HostRegistry": session.registry,
        "ResilientAdapter": session.get_adapter(url),
        "HostHealth": next(iter(health.values())),
        "TryRecord": spy.records[0],
        "TrySending": spy.sending[0],
        "BackendChange": spy.states[0],
        "OpenTelemetryHook": otel,
        "health": health,
        "ConfigError": config_error,
        "ResponseTooLarge": too_large,
        "WSGIMiddleware": inbound.WSGIMiddleware(lambda environ, start: [], loaded),
        "ASGIMiddleware": inbound.ASGIMiddleware(_asgi_app, loaded),
        "AttemptHeader": inbound.parse_attempt("1; max=3"),
        "FakeClock": clock,
        "FailedCall": told[0],
        "FallbackInfo": fallback_info,
        "ScriptedTransport": testing.ScriptedTransport(clock, 200),
        "FlakyUpstream": upstream,
        "Reply": Reply(),
        "Hang": testing.Hang(),
        "ResetMidBody": testing.ResetMidBody(),
        "Drip": testing.Drip(total_bytes=4, interval=0.01),
        "Trickle": testing.Trickle(interval=0.01),
        "CloseWithoutReply": testing.CloseWithoutReply(),
        "Flaky": testing.Flaky(rate=0.5),
        "Hit": upstream.received("/items")[0],
        "SystemClock": resilient_session.SYSTEM_CLOCK,
        # Off as soon as made: its state object is what the walk reads.
        "FastMode": testing.fast(on=False),
    }
    for error in _refusals(harness, url):
        built[type(error).__name__] = error
    for name in config.__all__:
        if name.endswith("Policy") and name not in built:
            built[name] = getattr(config, name)()
    try:
        with testing.LoopbackService(lambda environ, start: []) as service:
            built["LoopbackService"] = service
            yield built
    finally:
        session.close()
        sentinel_session.close()


# Classes with no instance of their own to show: a protocol, and the enums (whose members are
# scanned as plain values).
NOT_BUILT = frozenset(
    {
        "Clock",
        "BreakerState",
        "FallbackSource",
        "Reason",
        "Verdict",
        "TryHook",
        "SendHook",
        "StateHook",
        "StateChange",
        "BackendHook",
    }
)


def test_no_public_object_shows_a_secret(tmp_path, harness):
    """Config, policies, sessions, adapters, registries, health, errors and test helpers built
    with a store password, userinfo and a token show none of them in repr or str."""
    with FlakyUpstream() as upstream:
        upstream.script("/items", Reply(200))
        with _instances(tmp_path, harness, upstream) as built:
            public = {name: getattr(space, name) for space in NAMESPACES for name in space.__all__}
            classes = {name for name, value in public.items() if isinstance(value, type)}
            assert classes - NOT_BUILT - set(built) == set()
            assert set(built) >= {"CircuitOpenError", "ThrottledError", "DeadlineExceeded"}
            assert "ConcurrencyLimitError" in built
            # The store's URL reached the objects scanned, whole, where it is needed.
            assert built["StatePolicy"].url == STORE_URL  # type: ignore[attr-defined]
            sentinel_state = built["Config(sentinel)"].state  # type: ignore[attr-defined]
            assert sentinel_state.sentinel_password == SECRETS[0]
            leaks = [
                leak for name, value in {**public, **built}.items() for leak in _leaks(value, name)
            ]
            assert leaks == [], "\n".join(leak[:200] for leak in leaks)
