"""What requests' and urllib3's exceptions say about a try, and the exception each refusal
raises: the requests wire's errors (``requests_wire.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError
from urllib3.exceptions import ProxyError as Urllib3ProxyError

from resilient_session._pipeline.reason import Reason
from resilient_session._state.try_table import ErrorKind
from resilient_session.errors import (
    CircuitOpenError,
    ConcurrencyLimitError,
    DeadlineExceeded,
    HedgeCancelled,
    ThrottledError,
)

# Retrying these only hides a configuration problem: a bad certificate, a malformed URL, a
# proxy that wants credentials. They never count against the breaker either.
_NEVER_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.SSLError,
    requests.exceptions.InvalidURL,
    requests.exceptions.InvalidSchema,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidHeader,
)

_TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
)

_REFUSALS: Final[Mapping[Reason, type[DeadlineExceeded | CircuitOpenError | HedgeCancelled]]] = {
    Reason.BREAKER_OPEN: CircuitOpenError,
    Reason.THROTTLED: ThrottledError,
    Reason.CONCURRENCY_LIMIT: ConcurrencyLimitError,
    Reason.DEADLINE_SPENT: DeadlineExceeded,
    Reason.DEADLINE: DeadlineExceeded,
    Reason.HEDGE_LOST: HedgeCancelled,
}


def error_kind(error: BaseException) -> ErrorKind:
    """What *error* says; a proxy that refused the connection never saw the request, so the
    connect rule comes before the proxy's 407."""
    if isinstance(error, DeadlineExceeded):
        return ErrorKind.DEADLINE_CUT
    if is_connect_failure(error):
        return ErrorKind.CONNECT
    return ErrorKind.TRANSIENT if is_transient_error(error) else ErrorKind.OURS


def is_transient_error(error: BaseException) -> bool:
    """True for transport failures worth another try; False for configuration-shaped errors."""
    if isinstance(error, _NEVER_ERRORS):
        return False
    if isinstance(error, requests.exceptions.ProxyError):
        # A proxy that answers 407 wants credentials; asking again will not change that.
        return "407" not in str(error)
    return isinstance(error, _TRANSIENT_ERRORS)


def is_connect_failure(error: BaseException) -> bool:
    """True when the request never left: refused, DNS failure, connect timeout.

    Such a failure is safe to retry for every method. Anything after the request may have
    been written (a reset, a read timeout, a dropped keep-alive connection) is a read failure.
    A proxy that refused the connection counts too: the request never reached it; a proxy
    that answered (407 included) does not.
    """
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return True
    if not isinstance(error, requests.exceptions.ConnectionError) or not error.args:
        return False
    cause = error.args[0]
    if isinstance(cause, MaxRetryError):
        cause = cause.reason
    if isinstance(cause, Urllib3ProxyError):
        cause = cause.original_error
    return isinstance(cause, NewConnectionError)


def refusal(
    reason: Reason, message: str, request: Any, original: BaseException | None = None
) -> Exception:
    """The library's exception for a try refused or cut for *reason*: a subclass of the
    requests exception a caller of requests already catches for it."""
    kind = _REFUSALS.get(reason)
    if kind is None:
        raise ValueError(f"no try is refused for the reason {reason.value!r}")
    return kind(message, request=request, original=original)
