"""The demo: named scenes against an embedded FlakyUpstream, each one behaviour, live events.

``run_demo(stream)`` is an application, like the ``demo`` command that calls it: it configures
structlog for its own duration (JSON lines to *stream*, plus a recorder for the closing table)
and puts the previous configuration back when it ends. Library code never does this.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TextIO

import requests
import structlog

from resilient_session._observe.render import json_processors
from resilient_session._pipeline.attempt import Verdict
from resilient_session._state.fallback import fallback_of
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.inbound import WSGIMiddleware
from resilient_session.session import ResilientSession
from resilient_session.testing.service import LoopbackService
from resilient_session.testing.upstream import Flaky, FlakyUpstream, Hang, Reply

SCENE_EVENT: Final = "demo.scene"
_FAIL_FAST: Final = Verdict.FAIL_FAST.value

# Real time passes in the demo, so backoff is tiny and the whole walk takes a few seconds.
_FAST: Final[Mapping[str, Mapping[str, Any]]] = {
    "retry": {"backoff_base": 0.1, "backoff_cap": 0.4},
    "timeout": {"connect": 1.0, "read": 2.0},
}

_scene_log = structlog.get_logger("resilient_session.cli.demo")


@dataclass(frozen=True, slots=True)
class CallResult:
    """One call of a scene (or several alike, summed), as its ``http.try`` events told it.

    ``tries`` are the tries sent toward the upstream and ``refused`` those a local guard
    refused (``fail_fast``), as ``health()`` and ``stats`` count them (docs/events.md).
    """

    label: str
    calls: int
    tries: int
    refused: int
    waits: tuple[float, ...]
    decision: str
    reason: str
    result: str
    elapsed: float
    transitions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SceneResult:
    """A scene: what it shows, its calls, and how many requests reached the upstream."""

    number: int
    title: str
    calls: tuple[CallResult, ...]
    upstream_hits: int
    note: str


class _Recorder:
    """A structlog processor keeping a copy of each event, for the table at the end."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []

    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        self._events.append(dict(event_dict))
        return event_dict

    def take(self) -> list[dict[str, Any]]:
        events, self._events = self._events, []
        return events


class _Stage:
    """What every scene needs: the upstream, the recorder, and one call made and summarised."""

    def __init__(self, upstream: FlakyUpstream, recorder: _Recorder) -> None:
        self.upstream = upstream
        self.recorder = recorder

    def session(self, **sections: Mapping[str, Any]) -> ResilientSession:
        defaults = {name: dict(values) for name, values in _FAST.items()}
        for name, values in sections.items():
            defaults[name] = {**defaults.get(name, {}), **values}
        # A fixed seed: the same waits on every run, so the table reads the same.
        return ResilientSession({"defaults": defaults}, rng=random.Random(4))  # noqa: S311

    def call(
        self, session: ResilientSession, method: str, path: str, label: str = "", **kwargs: Any
    ) -> CallResult:
        self.recorder.take()
        started = SYSTEM_CLOCK.monotonic()
        try:
            response = session.request(method, self.upstream.url(path), **kwargs)
            result = f"{response.status_code} {response.reason}"
            served = fallback_of(response)
            if served is not None:
                result += f" ({served.source.value}, {served.reason})"
        except requests.RequestException as exc:
            result = type(exc).__name__
        elapsed = SYSTEM_CLOCK.monotonic() - started
        return _summarise(label or f"{method} {path}", self.recorder.take(), result, elapsed)


def _summarise(label: str, events: list[dict[str, Any]], result: str, elapsed: float) -> CallResult:
    tries = [event for event in events if event.get("event") == "http.try"]
    if not tries:
        raise RuntimeError(f"{label}: no http.try events were recorded")
    final = tries[-1]
    return CallResult(
        label=label,
        calls=sum(1 for event in tries if event["attempt"] == 1),
        tries=_sent(tries),
        refused=len(tries) - _sent(tries),
        waits=tuple(event["wait"] for event in tries if event["decision"] == "retry"),
        decision=final["decision"],
        reason=final["reason"],
        result=result,
        elapsed=elapsed,
        transitions=tuple(
            f"{event['from']}->{event['to']}"
            for event in events
            if event.get("event") == "breaker.transition"
        ),
    )


def _sent(tries: Sequence[Mapping[str, Any]]) -> int:
    """How many of the ``http.try`` events *tries* stand for a try sent: not ``fail_fast``."""
    return sum(1 for event in tries if event["decision"] != _FAIL_FAST)


def _summed(label: str, calls: Sequence[CallResult]) -> CallResult:
    """Many calls alike as one row: tries and waits added up, the results counted."""
    results = Counter(call.result for call in calls)
    return CallResult(
        label=label,
        calls=sum(call.calls for call in calls),
        tries=sum(call.tries for call in calls),
        refused=sum(call.refused for call in calls),
        waits=tuple(wait for call in calls for wait in call.waits),
        decision=calls[-1].decision,
        reason=calls[-1].reason,
        result=", ".join(f"{count}x {result}" for result, count in results.most_common()),
        elapsed=sum(call.elapsed for call in calls),
    )


def _overload_retried(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/flaky", Reply(503), Reply(503), Reply(200, body=b"ok"))
    with stage.session() as session:
        call = stage.call(session, "GET", "/flaky")
    return [call], "503 is the overload tier: retried with backoff until the 200"


def _retry_after_honoured(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/throttled", Reply(429, headers={"Retry-After": "1"}), Reply(200))
    with stage.session() as session:
        call = stage.call(session, "GET", "/throttled")
    return [call], "the wait before the retry is the 1 s the upstream asked for"


def _retry_after_too_long(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/busy", Reply(503, headers={"Retry-After": "120"}))
    with stage.session(retry={"retry_after_cap": 2.0}) as session:
        call = stage.call(session, "GET", "/busy")
    return [call], "Retry-After: 120 is over the 2 s cap: the 503 is returned at once"


def _post_sent_once(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/orders", Reply(502), Reply(201))
    with stage.session() as session:
        call = stage.call(session, "POST", "/orders", data=b'{"item": 1}')
    hits = stage.upstream.hits("/orders")
    return [call], f"a POST without Idempotency-Key is not replayed: upstream saw {hits} request"


def _post_with_key(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/payments", Reply(502), Reply(201, body=b"created"))
    with stage.session() as session:
        call = stage.call(
            session,
            "POST",
            "/payments",
            "POST /payments + key",
            data=b'{"amount": 5}',
            headers={"Idempotency-Key": "demo-7f3a"},
        )
    return [call], "with an Idempotency-Key the same POST is safe to send again"


def _deadline_cuts_hang(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/slow", Hang(2.0))
    with stage.session(timeout={"read": 0.3}) as session:
        call = stage.call(session, "GET", "/slow", "GET /slow, deadline 0.5 s", deadline=0.5)
    return [call], (
        f"try 1 hit its 0.3 s read timeout; the retry was cut at the 0.5 s deadline "
        f"(call took {call.elapsed:.2f} s)"
    )


_OUTAGE_CALLS: Final = 10
_OUTAGE_ATTEMPTS: Final = 4


def _outage_budget(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/down", Reply(503))
    calls = []
    # No refill and a small bucket, so the figures are exact: 2 tokens to start, 0.2 a call.
    with stage.session(
        retry={"max_attempts": _OUTAGE_ATTEMPTS, "backoff_base": 0.005, "backoff_cap": 0.01},
        budget={"ratio": 0.2, "max_tokens": 2, "min_per_second": 0},
        breaker={"failure_threshold": 100},
    ) as session:
        for _ in range(_OUTAGE_CALLS):
            calls.append(stage.call(session, "GET", "/down"))
    hits = stage.upstream.hits("/down")
    return [_summed(f"{_OUTAGE_CALLS}x GET /down", calls)], (
        f"upstream saw {hits} requests for {_OUTAGE_CALLS} calls; "
        f"{_OUTAGE_CALLS * _OUTAGE_ATTEMPTS} without a retry budget"
    )


_RECOVERY: Final = 0.5


def _breaker_cycle(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/fragile", Reply(500), Reply(500), Reply(200, body=b"back"))
    with stage.session(
        retry={"max_attempts": 3},
        breaker={"failure_threshold": 2, "recovery_timeout": _RECOVERY},
    ) as session:
        opened = stage.call(session, "GET", "/fragile")
        refused = stage.call(session, "GET", "/fragile")
        SYSTEM_CLOCK.sleep(_RECOVERY + 0.05)
        probed = stage.call(session, "GET", "/fragile", f"GET /fragile, {_RECOVERY} s later")
    hits = stage.upstream.hits("/fragile")
    return [opened, refused, probed], (
        f"two 500s open the breaker; the next call never leaves; after {_RECOVERY} s one "
        f"probe closes it (upstream saw {hits} requests for 3 calls)"
    )


_BROWNOUT_CALLS: Final = 100
# Backoff short enough that a hundred calls take a moment; the decisions are the same.
_BROWNOUT_RETRY: Final = {"backoff_base": 0.002, "backoff_cap": 0.005}


def _brownout(stage: _Stage, path: str, rate: float) -> tuple[CallResult, int, int]:
    stage.upstream.script(path, Flaky(rate, seed=11))
    with stage.session(retry=_BROWNOUT_RETRY) as session:
        calls = [stage.call(session, "GET", path) for _ in range(_BROWNOUT_CALLS)]
        refused = session.health()[f"http://127.0.0.1:{stage.upstream.port}"].refused
    served = sum(1 for call in calls if call.result.startswith("200"))
    return _summed(f"{_BROWNOUT_CALLS}x GET {path}", calls), served, refused


def _brownout_keeps_serving(stage: _Stage) -> tuple[list[CallResult], str]:
    row, served, refused = _brownout(stage, "/brownout", 0.5)
    hits = stage.upstream.hits("/brownout")
    return [row], (
        f"half the tries fail at random: the breaker never opens and {served} of "
        f"{_BROWNOUT_CALLS} calls are served, where one try each would serve about half "
        f"(upstream saw {hits} requests; {refused} tries throttled while failures ran over half)"
    )


def _brownout_throttled(stage: _Stage) -> tuple[list[CallResult], str]:
    row, served, refused = _brownout(stage, "/sinking", 0.9)
    hits = stage.upstream.hits("/sinking")
    return [row], (
        f"nine tries in ten fail: the throttle refused {refused} tries locally, so the upstream "
        f"saw {hits} requests for {_BROWNOUT_CALLS} calls; {served} were served"
    )


_HANG_CALLS: Final = 12
_HANG_LIMIT: Final = 4


def _hang_held(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/stuck", Hang(1.0))
    with stage.session(
        retry={"max_attempts": 1},
        timeout={"read": 0.6},
        # This host hangs from its first try, before any answer: with no first burst above
        # the limit, all it is sent is the limit.
        limit={"initial": _HANG_LIMIT, "initial_burst": _HANG_LIMIT, "min": 2, "max_wait": 0.2},
    ) as session:
        stage.recorder.take()
        started = SYSTEM_CLOCK.monotonic()
        with ThreadPoolExecutor(max_workers=_HANG_CALLS) as pool:
            results = list(pool.map(lambda _: _outcome(session, stage), range(_HANG_CALLS)))
        elapsed = SYSTEM_CLOCK.monotonic() - started
        events = stage.recorder.take()
    tries = [event for event in events if event.get("event") == "http.try"]
    counted = Counter(results)
    row = CallResult(
        label=f"{_HANG_CALLS}x GET /stuck at once",
        calls=_HANG_CALLS,
        tries=_sent(tries),
        refused=len(tries) - _sent(tries),
        waits=(),
        decision="fail_fast",
        reason="concurrency_limit",
        result=", ".join(f"{count}x {result}" for result, count in counted.most_common()),
        elapsed=elapsed,
    )
    hits = stage.upstream.hits("/stuck")
    return [row], (
        f"the host hangs: {hits} tries reached it (the limit), the other "
        f"{counted['ConcurrencyLimitError']} calls failed fast after waiting 0.2 s for a slot"
    )


def _outcome(session: ResilientSession, stage: _Stage) -> str:
    try:
        response = session.get(stage.upstream.url("/stuck"))
    except requests.RequestException as exc:
        return type(exc).__name__
    return f"{response.status_code} {response.reason}"


_HOP_ATTEMPTS: Final = 3
# Both hops retry fast; the counts are what the scene shows.
_HOP_RETRY: Final = {"max_attempts": _HOP_ATTEMPTS, "backoff_base": 0.005, "backoff_cap": 0.01}


def _two_hops(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script("/hop", Reply(503))
    rows, seen = [], []
    for wrapped in (True, False):
        before = stage.upstream.hits("/hop")
        a_row, b_row = _through_b(stage, wrapped)
        rows += [a_row, b_row]
        seen.append(stage.upstream.hits("/hop") - before)
    return rows, (
        f"A -> B -> C, C down, {_HOP_ATTEMPTS} tries a call at A and at B: C saw {seen[0]} "
        f"requests for the user's call with B wrapped in the middleware (one try per call "
        f"while A will retry, B's own retries on A's last try), {seen[1]} without "
        f"({_HOP_ATTEMPTS} x {_HOP_ATTEMPTS})"
    )


def _through_b(stage: _Stage, wrapped: bool) -> tuple[CallResult, CallResult]:
    """One user call from A through a service B, in this process, to the upstream C."""
    with stage.session(retry=_HOP_RETRY) as b_session:
        c_url = stage.upstream.url("/hop")

        def b_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            # B passes C's status on, as a proxy would, so that A can retry it.
            response = b_session.get(c_url)
            start_response(f"{response.status_code} {response.reason}", [])
            return [response.content]

        app = WSGIMiddleware(b_app) if wrapped else b_app
        with LoopbackService(app) as b, stage.session(retry=_HOP_RETRY) as a:
            stage.recorder.take()
            started = SYSTEM_CLOCK.monotonic()
            response = a.get(b.url("/hop"))
            elapsed = SYSTEM_CLOCK.monotonic() - started
            events = stage.recorder.take()
    a_host = b.host_key
    a_events = [e for e in events if e.get("host") == a_host]
    b_events = [e for e in events if e.get("event") == "http.try" and e.get("host") != a_host]
    how = "B wrapped" if wrapped else "B bare"
    result = f"{response.status_code} {response.reason}"
    a_row = _summarise(f"A: GET B/hop, {how}", a_events, result, elapsed)
    b_calls = sum(1 for e in b_events if e["attempt"] == 1)
    b_row = _summarise(f"B: its {b_calls} calls to C", b_events, result, elapsed)
    return a_row, b_row


# Short: the scene shows the recovery, not the wait for it.
_STALE_RECOVERY: Final = 0.2


def _stale_while_down(stage: _Stage) -> tuple[list[CallResult], str]:
    stage.upstream.script(
        "/prices", Reply(200, body=b"1.08"), Reply(503), Reply(503), Reply(200, body=b"1.09")
    )
    with stage.session(
        retry={"max_attempts": 1},
        breaker={"failure_threshold": 2, "recovery_timeout": _STALE_RECOVERY},
        fallback={"stale": {"enabled": True}},
    ) as session:
        fresh = stage.call(session, "GET", "/prices", "GET /prices, host up")
        down = [stage.call(session, "GET", "/prices") for _ in range(3)]
        SYSTEM_CLOCK.sleep(_STALE_RECOVERY + 0.05)
        back = stage.call(session, "GET", "/prices", f"GET /prices, {_STALE_RECOVERY} s later")
        served = session.health()[stage.upstream.base_url].stale_served
    hits = stage.upstream.hits("/prices")
    return [fresh, _summed("3x GET /prices, host down", down), back], (
        f"the host goes down: {served} calls answered with its last good answer, marked "
        f"(fallback_of), the last while the breaker is open; then it recovers (upstream saw "
        f"{hits} requests for 5 calls)"
    )


_SCENES: Final[tuple[tuple[str, Callable[[_Stage], tuple[list[CallResult], str]]], ...]] = (
    ("503 retried to success", _overload_retried),
    ("429 Retry-After honoured", _retry_after_honoured),
    ("Retry-After over the cap", _retry_after_too_long),
    ("POST sent once", _post_sent_once),
    ("POST + Idempotency-Key retried", _post_with_key),
    ("deadline cuts a hang", _deadline_cuts_hang),
    ("outage: budget holds retries", _outage_budget),
    ("breaker opens, probes, closes", _breaker_cycle),
    ("brownout keeps serving", _brownout_keeps_serving),
    ("heavy brownout throttled", _brownout_throttled),
    ("hang held by the limit", _hang_held),
    ("two hops: one layer retries", _two_hops),
    ("host down: stale answers stand in", _stale_while_down),
)


def run_demo(stream: TextIO) -> list[SceneResult]:
    """Play every scene against a fresh loopback upstream; events go to *stream* as JSON lines.

    Each scene has its own session (its own breakers and budgets) and its own path, so no
    scene sees another's state. Takes about three seconds of real time.

    Returns:
        One result per scene, in order, for the closing table.
    """
    results = []
    with _recording(stream) as recorder, FlakyUpstream() as upstream:
        stage = _Stage(upstream, recorder)
        for number, (title, play) in enumerate(_SCENES, start=1):
            _scene_log.info(SCENE_EVENT, scene=number, title=title)
            before = upstream.total_hits
            calls, note = play(stage)
            results.append(
                SceneResult(number, title, tuple(calls), upstream.total_hits - before, note)
            )
    return results


@contextmanager
def _recording(stream: TextIO) -> Iterator[_Recorder]:
    was_configured = structlog.is_configured()
    previous = structlog.get_config()
    recorder = _Recorder()
    structlog.configure(
        processors=[recorder, *json_processors()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    try:
        yield recorder
    finally:
        if was_configured:
            structlog.configure(**previous)
        else:
            structlog.reset_defaults()
