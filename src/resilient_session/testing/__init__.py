"""Test helpers for code that uses resilient_session: a fake clock and a scripted transport,
and real loopback servers: ``FlakyUpstream`` with its steps (``Reply``, ``Hang``, ...) and
``LoopbackService`` (the upstream's own ``Step`` alias stays in
``resilient_session.testing.upstream``: ``Step`` here is the scripted transport's).

Example::

    clock = FakeClock()
    session = ResilientSession(clock=clock)
    transport = ScriptedTransport(clock, 503, (429, {"Retry-After": "2"}), 200)
    transport.attach(session)
    assert session.get("https://api.test/items").status_code == 200
    assert transport.calls == 3 and clock.sleeps[1] == 2.0

``fast()`` makes every session's waits cost no real time, for a whole suite (docs/testing.md).
The loopback servers are imported when first named, so a suite that only fakes the clock loads
no server code (``http.server``, ``socketserver``, ``wsgiref``).
"""

from __future__ import annotations

import http
import importlib
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import requests
from requests.structures import CaseInsensitiveDict

from resilient_session._compat import keep_content
from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session.adapter import ResilientAdapter
from resilient_session.session import ResilientSession

from .fast import FastMode, fast

if TYPE_CHECKING:
    from .faults import (
        MAX_WAIT,
        CloseWithoutReply,
        Drip,
        Flaky,
        Hang,
        Hit,
        Reply,
        ResetMidBody,
        Trickle,
    )
    from .service import LoopbackService
    from .upstream import FlakyUpstream, refused_url

# Each name the loopback servers give, and the module that holds it.
_SERVED_BY: dict[str, str] = {
    **dict.fromkeys(
        (
            "MAX_WAIT",
            "CloseWithoutReply",
            "Drip",
            "Flaky",
            "Hang",
            "Hit",
            "Reply",
            "ResetMidBody",
            "Trickle",
        ),
        "faults",
    ),
    "LoopbackService": "service",
    "FlakyUpstream": "upstream",
    "refused_url": "upstream",
}


def __getattr__(name: str) -> Any:
    module = _SERVED_BY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_WAIT",
    "CloseWithoutReply",
    "Drip",
    "FakeClock",
    "FastMode",
    "Flaky",
    "FlakyUpstream",
    "Hang",
    "Hit",
    "LoopbackService",
    "Reply",
    "ResetMidBody",
    "ScriptedTransport",
    "Step",
    "Trickle",
    "build_response",
    "fast",
    "refused_url",
]

Step: TypeAlias = (
    int
    | tuple[int, Mapping[str, str]]
    | tuple[int, Mapping[str, str], bytes]
    | Exception
    | type[Exception]
)


class FakeClock:
    """A clock that only moves when told: ``sleep`` and ``asleep`` record and advance at once.

    ``asleep`` returns without giving the event loop a turn, under asyncio and trio alike:
    the tasks of a test on this clock run in the same order whichever loop runs them.
    """

    def __init__(self, start: float = 1_000.0, wall_start: float = 1_700_000_000.0) -> None:
        self.now = start
        self._offset = wall_start - start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now + self._offset

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def advance(self, seconds: float) -> None:
        """Let *seconds* pass, as latency or time between calls."""
        with self._lock:
            self.now += seconds


class ScriptedTransport:
    """A transport that plays *steps* in order, one per try; the last one repeats.

    A step is a status, ``(status, headers)``, ``(status, headers, body)``, or an exception
    (instance or class) to fail the try with. Each try advances *clock* by *latency*.
    ``sent`` keeps every attempt it received, so tests can read headers and timeouts.
    """

    def __init__(self, clock: FakeClock, *steps: Step, latency: float = 0.0) -> None:
        if not steps:
            raise ValueError("ScriptedTransport needs at least one step")
        self._clock = clock
        self._steps = steps
        self._latency = latency
        self.sent: list[Attempt] = []

    @property
    def calls(self) -> int:
        return len(self.sent)

    def attach(
        self, session: ResilientSession, prefixes: tuple[str, ...] = ("https://", "http://")
    ) -> None:
        """Play the script for *session*'s calls to URLs under *prefixes*, in place of the
        network, through the whole pipeline and on the session's per-host state.

        Raises:
            ValueError: *session* runs on another clock than this transport's.
        """
        if session._clock is not self._clock:
            raise ValueError("attach to a session made with this transport's clock")
        adapter = _ScriptedAdapter(
            self,
            registry=session.registry,
            clock=self._clock,
            rng=session._rng,
            fallback=session._fallback,
        )
        for prefix in prefixes:
            session.mount(prefix, adapter)

    def __call__(self, attempt: Attempt) -> Outcome:
        step = self._steps[min(len(self.sent), len(self._steps) - 1)]
        self.sent.append(attempt)
        self._clock.advance(self._latency)
        if isinstance(step, Exception):
            return Outcome(error=step)
        if isinstance(step, type):
            return Outcome(error=step())
        return Outcome(response=build_response(attempt.request, step))


class _ScriptedAdapter(ResilientAdapter):
    """A ResilientAdapter whose tries are played by a ScriptedTransport instead of sent: the
    pipeline is built around ``_transport``, which this replaces."""

    def __init__(self, script: ScriptedTransport, **kwargs: Any) -> None:
        self._script = script
        super().__init__(**kwargs)

    def _transport(self, attempt: Attempt) -> Outcome:
        return self._script(attempt)


def build_response(
    request: requests.PreparedRequest,
    step: int | tuple[int, Mapping[str, str]] | tuple[int, Mapping[str, str], bytes],
) -> requests.Response:
    """A complete ``requests.Response`` to *request*, with its body already read."""
    headers: Mapping[str, str] = {}
    body = b""
    if isinstance(step, int):
        status = step
    elif len(step) == 2:
        status, headers = step
    else:
        status, headers, body = step
    response = requests.Response()
    response.status_code = status
    response.headers = CaseInsensitiveDict(headers)
    keep_content(response, body)
    response.url = request.url or ""
    response.request = request
    try:
        response.reason = http.HTTPStatus(status).phrase
    except ValueError:
        response.reason = ""
    return response
