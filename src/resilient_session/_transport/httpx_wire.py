"""The httpx wire: the decisions' asks (``_pipeline/wire.py``) done on ``httpx.Request`` and
``httpx.Response``, for ``resilient_session.httpx``'s transport.

What differs from the requests wire, and why:

- Timeouts travel in the request (``request.extensions["timeout"]``: connect, read, write
  and pool seconds), so a try's clamped timeouts go out on its own copy of the request.
- A sync try cannot be cut from outside: stock httpx offers no hook to shut a connection
  down mid-read. Its bound is its clamped timeouts (no single wait outlasts the deadline)
  and a check after (``CheckedBound``); a body read inside the try is checked between chunks
  (``httpx_body.py``). A bare transport returns at the headers, so a body the caller reads
  later is bounded only by its read timeout per chunk: ``ResilientClient`` reads it inside
  the try. An async try's bound is a cancel scope (``_pipeline/aio``).
- Cookies: httpx's client keeps its jar and sets each request's Cookie header itself; it sees
  only the answer the transport returns. An answer a retry replaces is seen by no jar, so the
  cookies it set ride on the call's later tries (as on a redirect hop), and stop there.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping
from typing import Any, Final

import httpx

from resilient_session._observe.redact import redact_text
from resilient_session._pipeline.clamp import clamp
from resilient_session._pipeline.clamp import seconds as _seconds
from resilient_session._pipeline.reason import Reason
from resilient_session._state.fallback import FallbackInfo
from resilient_session._state.fallback import mark as mark_fallback
from resilient_session._state.runtime import Runtime
from resilient_session._state.stale import StaleHit
from resilient_session._state.try_table import ErrorKind
from resilient_session.clock import SYSTEM_CLOCK

from . import httpx_errors
from .httpx_compat import copied_request, headers_with, request_with_header
from .httpx_errors import DeadlineExceeded

# What a retried answer's body is read up to, so it still reads should the call end with it.
DRAIN_LIMIT: Final = 64 * 1024

_monotonic = SYSTEM_CLOCK.monotonic


def extension_timeout(timeout: Any) -> dict[str, float | None]:
    """The ``request.extensions["timeout"]`` dict for any timeout the wire reads: the dict
    itself, an ``httpx.Timeout``, a ``(connect, read)`` pair (the host's default) or seconds."""
    if isinstance(timeout, dict):
        return timeout
    if isinstance(timeout, httpx.Timeout):
        return timeout.as_dict()
    connect, read = _parts(timeout)
    return {"connect": connect, "read": read, "write": read, "pool": connect}


def _parts(timeout: Any) -> tuple[float | None, float | None]:
    if isinstance(timeout, Mapping):
        return _seconds(timeout.get("connect")), _seconds(timeout.get("read"))
    if isinstance(timeout, httpx.Timeout):
        return _seconds(timeout.connect), _seconds(timeout.read)
    if isinstance(timeout, tuple | list) and len(timeout) == 2:
        return _seconds(timeout[0]), _seconds(timeout[1])
    value = _seconds(timeout)
    return value, value


_BOUND: contextvars.ContextVar[CheckedBound | None] = contextvars.ContextVar(
    "resilient_session_httpx_bound", default=None
)


class CheckedBound:
    """A sync try's bound: its timeouts clamped to *remaining* seconds, and on the way out a
    check whether it ran that long (``fired``), on the real clock its timeouts run on."""

    __slots__ = ("_token", "fired", "until")

    def __init__(self, remaining: float) -> None:
        self.until = _monotonic() + remaining
        self.fired = False

    def __enter__(self) -> CheckedBound:
        self._token = _BOUND.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _BOUND.reset(self._token)
        self.fired = _monotonic() >= self.until


class RaceCheck:
    """A raced try's bound: the bound around it (none without a deadline), and a cut the race
    asks for. A sync httpx try cannot be ended from another thread, so a cut try runs on
    within its clamped timeouts and its answer is dropped."""

    __slots__ = ("_outer", "_token", "cut_asked", "fired")

    def __init__(self, outer: CheckedBound | None) -> None:
        self._outer = outer
        self.cut_asked = False
        self.fired = False

    def __enter__(self) -> RaceCheck:
        return self

    def __exit__(self, *exc_info: object) -> None:
        outer = self._outer
        self.fired = self.cut_asked or (outer is not None and _monotonic() >= outer.until)

    def cut(self) -> None:
        self.cut_asked = True

    def pass_on(self) -> None:
        outer = self._outer
        if self.fired and outer is not None:
            outer.fired = True

    def hedge_wait(self, delay: float) -> float:
        # No socket to ask when the request went out: the delay on the caller's clock stands.
        return 0.0


class ScopeBound:
    """An async try's bound: a cancel scope ending it *remaining* seconds from now, wherever
    it waits (connecting, in the pool, mid-body), under asyncio or trio alike."""

    __slots__ = ("_scope", "fired")

    def __init__(self, remaining: float) -> None:
        import anyio  # only async calls load it

        self._scope = anyio.CancelScope(deadline=anyio.current_time() + remaining)
        self.fired = False

    def __enter__(self) -> ScopeBound:
        self._scope.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        swallowed = bool(self._scope.__exit__(*exc_info))
        self.fired = self._scope.cancelled_caught
        return swallowed


class HttpxWire:
    """The wire of ``resilient_session.httpx.ResilientTransport``: one, stateless, shared."""

    __slots__ = ()

    # -- errors: what one says, and the refusal for a reason ---------------------------------

    def error_kind(self, error: BaseException) -> ErrorKind:
        """What *error* says, by httpx's exception classes (``httpx_errors.py``)."""
        return httpx_errors.error_kind(error)

    def refusal(
        self, reason: Reason, message: str, request: Any, original: BaseException | None = None
    ) -> Exception:
        """``CircuitOpenError``, ``ThrottledError``, ``ConcurrencyLimitError``,
        ``DeadlineExceeded`` or ``HedgeCancelled`` of httpx's family, as *reason* says."""
        return httpx_errors.refusal(reason, message, request, original)

    # -- the try's request: headers, timeouts, a bound in time -------------------------------

    def with_headers(
        self, request: httpx.Request, pairs: Iterable[tuple[str, str]], first: bool = False
    ) -> httpx.Request:
        """A copy of *request* sending the ``(name, value)`` *pairs* too (a name of another
        case replaced). Always a copy, *first* or not: httpx's client builds a redirect hop
        and an auth flow's next request from the request it handed the transport and hands
        that request back on the answer, and a mock (respx, pytest-httpx) keeps each try's.
        Written into the request instead, the header cost ~11,000 instructions a call more
        under httpx's own cookie jar, which reads every header again once the answer is in,
        and saved ~2,600 under the resilient clients' (docs/architecture.md, "Hot path")."""
        sent = copied_request(request)
        sent.headers = headers_with(request.headers, pairs)
        return sent

    def with_header(
        self, request: httpx.Request, name: str, value: str, first: bool = False
    ) -> httpx.Request:
        """``with_headers`` for one header: the attempt header of each try of a call without
        a deadline."""
        # hot path: single-header
        return request_with_header(request, name, value)

    def timeouts(self, timeout: Any) -> tuple[float | None, float | None]:
        """``(connect, read)`` seconds of an extension dict, an ``httpx.Timeout``, a pair or
        seconds; None is no limit."""
        return _parts(timeout)

    def clamped(self, timeout: Any, remaining: float) -> tuple[dict[str, float | None], bool, bool]:
        """The extension dict of *timeout* with every part cut to *remaining* when longer or
        unset (the pool's and the write's too), and whether connect and read were cut."""
        parts = extension_timeout(timeout)
        connect, connect_cut = clamp(_seconds(parts.get("connect")), remaining)
        read, read_cut = clamp(_seconds(parts.get("read")), remaining)
        clamped: dict[str, float | None] = {
            "connect": connect,
            "read": read,
            "write": clamp(_seconds(parts.get("write")), remaining)[0],
            "pool": clamp(_seconds(parts.get("pool")), remaining)[0],
        }
        return clamped, connect_cut, read_cut

    def bounded(self, remaining: float, body: bool) -> CheckedBound:
        """The clamped timeouts and a check after (``CheckedBound``); *body* changes nothing:
        a body read inside the try is checked between chunks wherever it is read."""
        return CheckedBound(remaining)

    def abounded(self, remaining: float) -> ScopeBound:
        """A cancel scope around an async try (``ScopeBound``)."""
        return ScopeBound(remaining)

    def raced(self) -> RaceCheck:
        """A bound for a raced try inside the deadline stage's, if any (``RaceCheck``)."""
        return RaceCheck(_BOUND.get())

    def deadline_error(
        self,
        fired: bool,
        error: BaseException | None,
        answer: Any,
        cuts: tuple[bool, bool],
        message: str,
        request: Any,
        redact: frozenset[str],
    ) -> Exception | None:
        """``DeadlineExceeded`` for a try the deadline ended: an ``httpx.TimeoutException`` of
        a part it clamped, or an error after the bound ran out; None for any other ending. A
        whole answer that came late is kept: nothing of it was cut."""
        if error is None or isinstance(error, DeadlineExceeded):
            return None
        if fired or isinstance(error, httpx.TimeoutException):
            connect_cut, read_cut = cuts
            cut = connect_cut if self.cut_connecting(error) else read_cut
            if cut or fired:
                return DeadlineExceeded(
                    f"{message}: {redact_text(str(error), redact)}",
                    request=request,
                    original=error,
                )
        return None

    def cut_connecting(self, error: BaseException) -> bool:
        """Whether *error* (or the one a ``DeadlineExceeded`` stands for) ran out before a
        connection was there: a connect or a pool timeout."""
        original = error.original if isinstance(error, DeadlineExceeded) else error
        return isinstance(original, httpx.ConnectTimeout | httpx.PoolTimeout)

    # -- answers: release one a retry replaces, carry the cookies it set ---------------------

    def release(
        self, answer: Any, deadline_at: float | None, runtime: Runtime
    ) -> DeadlineExceeded | None:
        """Read *answer*'s body when it declares at most ``DRAIN_LIMIT`` bytes (it then still
        reads, should the call end with it), then close it; a longer or unknown one is closed
        unread, its connection dropped rather than read to the end. The ``DeadlineExceeded``
        when the read outlasted *deadline_at*."""
        response: httpx.Response = answer
        if response.is_closed:
            return None
        try:
            if _small(response):
                response.read()
        except DeadlineExceeded as cut:
            return cut
        except httpx.HTTPError:
            pass  # the retry goes on; this answer was going to be dropped anyway
        finally:
            response.close()
        return _late(response, deadline_at, runtime)

    async def arelease(
        self, answer: Any, deadline_at: float | None, runtime: Runtime
    ) -> DeadlineExceeded | None:
        """``release`` for an answer of an async transport."""
        response: httpx.Response = answer
        if response.is_closed:
            return None
        try:
            if _small(response):
                await response.aread()
        except DeadlineExceeded as cut:
            return cut
        except httpx.HTTPError:
            pass
        finally:
            await response.aclose()
        return _late(response, deadline_at, runtime)

    def carried_cookies(
        self, request: Any, answer: Any, carried: Any
    ) -> tuple[httpx.Request, httpx.Cookies] | None:
        """A copy of the call's *request* whose Cookie header also sends *carried* and the
        cookies *answer* set (theirs win over a same-named one of the caller's); None when it
        set none."""
        if "set-cookie" not in answer.headers:
            return None
        cookies = httpx.Cookies(carried)
        cookies.extract_cookies(answer)
        probe = httpx.Request(request.method, request.url)
        cookies.set_cookie_header(probe)
        added = probe.headers.get("Cookie")
        if added is None:  # set for another domain or path than the request's
            return None
        pairs = dict(_cookie_pairs(request.headers.get("Cookie", "")))
        pairs.update(_cookie_pairs(added))
        retry = self.with_headers(
            request, (("Cookie", "; ".join(f"{k}={v}" for k, v in pairs.items())),)
        )
        return retry, cookies

    # -- fallback: what a call's answer holds, an answer made from a stored one, the mark ----

    def is_answer(self, value: object) -> bool:
        """An ``httpx.Response`` (or a subclass)."""
        return isinstance(value, httpx.Response)

    def body(self, answer: Any) -> bytes:
        """``answer.content`` of an ``httpx.Response``: read inside the try, as the caller
        does not stream."""
        content: bytes = answer.content
        return content

    def stored_answer(self, request: httpx.Request, hit: StaleHit) -> httpx.Response:
        """An ``httpx.Response`` to *request* holding the stored status, headers with ``Age``
        and body, read whole; the body was kept decoded, so ``Content-Encoding`` goes and
        ``Content-Length`` says what it holds."""
        stored = hit.answer
        headers = httpx.Headers(hit.served_headers())
        headers.pop("Content-Encoding", None)
        if "Content-Length" in headers:
            headers["Content-Length"] = str(len(stored.body))
        return httpx.Response(stored.status, headers=headers, content=stored.body, request=request)

    def mark(self, answer: Any, info: FallbackInfo) -> None:
        mark_fallback(answer, info)


# A shallow copy of a request: the same body, URL and header map, its own extensions.
copied = copied_request


def with_timeout(request: httpx.Request, timeout: dict[str, float | None]) -> httpx.Request:
    """*request* sending with *timeout*: itself when it already does, else a copy."""
    if request.extensions.get("timeout") is timeout:
        return request
    sent = copied(request)
    sent.extensions["timeout"] = timeout
    return sent


def _small(response: httpx.Response) -> bool:
    length = response.headers.get("Content-Length")
    return length is not None and length.isdigit() and int(length) <= DRAIN_LIMIT


def _late(
    response: httpx.Response, deadline_at: float | None, runtime: Runtime
) -> DeadlineExceeded | None:
    if deadline_at is None or runtime.clock.monotonic() < deadline_at:
        return None
    return DeadlineExceeded("deadline ran out while a retried answer was read")


def _cookie_pairs(header: str) -> Iterable[tuple[str, str]]:
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name:
            yield name, value


HTTPX_WIRE = HttpxWire()
