"""The httpx wire's errors: what httpx's exceptions say about a try, and the library's own
exceptions in httpx's family, which ``resilient_session.httpx`` re-exports.

A caller of httpx catches ``httpx.TransportError`` and ``httpx.TimeoutException``, never
``requests.RequestException``: each refusal here subclasses what an httpx caller already
catches for it, with the name it has in the requests family (``resilient_session.errors``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, Final

import httpx

from resilient_session._pipeline.reason import Reason
from resilient_session._state.try_table import ErrorKind


class _Redacted:
    """What every exception of this family shares with the requests family's: its message
    names the host or a redacted URL, it prints no chain, and the exception it stands for is
    kept unprinted in :attr:`original`."""

    original: BaseException | None = None

    def __init__(
        self,
        message: str,
        *,
        request: httpx.Request | None = None,
        original: BaseException | None = None,
    ) -> None:
        super().__init__(message, request=request)  # type: ignore[call-arg]  # httpx's RequestError
        self.original = original
        # Even raised while another exception is handled, the traceback ends here.
        self.__suppress_context__ = True

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled without the original (it may hold a connection) or the request.
        state = {
            key: value
            for key, value in self.__dict__.items()
            if key not in ("original", "_request", "response")
        }
        return type(self), self.args, state  # type: ignore[attr-defined]  # an Exception's


class DeadlineExceeded(_Redacted, httpx.TimeoutException):
    """The call's deadline ran out with no response at hand: an ``httpx.TimeoutException``,
    so ``except httpx.TimeoutException`` still catches it."""


class CircuitOpenError(_Redacted, httpx.TransportError):
    """The host's circuit breaker refused the call before it touched the network: an
    ``httpx.TransportError``, as an unreachable host is."""


class ThrottledError(CircuitOpenError):
    """The host's adaptive throttle refused the try locally."""


class ConcurrencyLimitError(CircuitOpenError):
    """The host's concurrency limit was full and no slot freed within ``limit.max_wait``."""


class HedgeCancelled(_Redacted, httpx.TransportError):
    """Another try of the call answered first (hedging); never reaches the caller."""


class ResponseTooLarge(_Redacted, httpx.TransportError):
    """A response's body was longer than its host's ``retry.max_response_bytes``; reading
    stopped past the cap and the connection was closed.

    Attributes:
        limit: the cap it crossed, in bytes.
        response: the response whose body was too large: status and headers read as usual.
    """

    def __init__(
        self,
        message: str,
        *,
        request: httpx.Request | None = None,
        limit: int = 0,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(message, request=request)
        self.limit = limit
        self.response = response


_REFUSALS: Final[Mapping[Reason, type[_Redacted]]] = {
    Reason.BREAKER_OPEN: CircuitOpenError,
    Reason.THROTTLED: ThrottledError,
    Reason.CONCURRENCY_LIMIT: ConcurrencyLimitError,
    Reason.DEADLINE_SPENT: DeadlineExceeded,
    Reason.DEADLINE: DeadlineExceeded,
    Reason.HEDGE_LOST: HedgeCancelled,
}

# The request never left: no connection was made, or none came free in the pool.
_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

# Ours to fix, never the host's: retrying only hides a configuration problem.
_OURS_ERRORS = (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL)

# How far down an exception's causes a TLS failure is looked for: httpx wraps httpcore's
# error, which wraps the ssl module's.
_CAUSE_DEPTH = 4


def error_kind(error: BaseException) -> ErrorKind:
    """What *error* says, by httpx's exception classes (and the ssl error beneath a connect
    failure, which is ours to fix)."""
    if isinstance(error, DeadlineExceeded):
        return ErrorKind.DEADLINE_CUT
    if isinstance(error, (_Redacted, *_OURS_ERRORS)):
        return ErrorKind.OURS
    if isinstance(error, _CONNECT_ERRORS):
        return ErrorKind.OURS if _tls_failure(error) else ErrorKind.CONNECT
    if isinstance(error, httpx.ProxyError):
        # A proxy that answers 407 wants credentials; asking again will not change that.
        return ErrorKind.OURS if "407" in str(error) else ErrorKind.TRANSIENT
    if isinstance(error, httpx.TransportError | httpx.DecodingError):
        return ErrorKind.TRANSIENT
    return ErrorKind.OURS


def _tls_failure(error: BaseException) -> bool:
    cause: BaseException | None = error
    for _ in range(_CAUSE_DEPTH):
        if cause is None:
            return False
        if isinstance(cause, ssl.SSLError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def refusal(
    reason: Reason, message: str, request: Any, original: BaseException | None = None
) -> Exception:
    """The library's exception for a try refused or cut for *reason*, in httpx's family."""
    kind = _REFUSALS.get(reason)
    if kind is None:
        raise ValueError(f"no try is refused for the reason {reason.value!r}")
    error: Exception = kind(message, request=request, original=original)  # type: ignore[assignment]  # each kind is an httpx exception
    return error
