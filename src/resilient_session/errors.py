"""The three exceptions resilient_session adds, each a subclass of what it refines."""

from __future__ import annotations

import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError
from urllib3.exceptions import ProxyError as Urllib3ProxyError


class DeadlineExceeded(requests.exceptions.Timeout):
    """The call's deadline ran out with no response at hand.

    A subclass of ``requests.Timeout``, so ``except requests.Timeout`` still catches it.
    """


class CircuitOpenError(requests.exceptions.ConnectionError):
    """The host's circuit breaker refused the call before it touched the network.

    A subclass of ``requests.ConnectionError``: to the caller an open breaker looks like an
    unreachable host, which is what it stands for.
    """


class ThrottledError(CircuitOpenError):
    """The host's adaptive throttle refused the try locally: the host has been failing a large
    share of recent tries, and this client sends it only what it is likely to answer.

    A subclass of ``CircuitOpenError``, so ``except CircuitOpenError`` (and ``except
    requests.ConnectionError``) catch every local refusal.
    """


class ConcurrencyLimitError(CircuitOpenError):
    """The host's concurrency limit was full and no slot freed within ``limit.max_wait``: this
    client already has as many tries in flight to the host as it currently takes.

    A subclass of ``CircuitOpenError``, so ``except CircuitOpenError`` (and ``except
    requests.ConnectionError``) catch every local refusal.
    """


class ConfigError(requests.exceptions.RequestException, ValueError):
    """The configuration is invalid; the message names the dotted key path and the bad value."""


def is_connect_failure(error: BaseException | None) -> bool:
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
