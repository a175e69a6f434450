"""The exceptions resilient_session adds, each a subclass of what it refines."""

from __future__ import annotations

from typing import Any

import requests


class _RedactedError(requests.exceptions.RequestException):
    """What every exception the library raises on a call shares: nothing printed holds a secret.

    Its message names the host (``scheme://host:port``) or a redacted URL, and its chain is
    cut: the library sets no ``__cause__`` or ``__context__`` on it, and
    ``__suppress_context__`` is True, so ``logging.exception`` or
    ``traceback.format_exception`` prints this exception alone. The exception it stands for,
    whose text (urllib3's) quotes the whole URL, is kept unprinted in :attr:`original`, for a
    debugger or a deliberate look.

    Attributes:
        original: the exception this one replaced (a ``requests.ConnectTimeout`` for a connect
            cut by the deadline, urllib3's read error for a body), unredacted; None
            for a try refused before it was sent. Do not log it as it is.
        request: the request, as on every ``requests.RequestException``; unredacted too.
    """

    original: BaseException | None = None

    def __init__(self, *args: Any, original: BaseException | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.original = original
        # Even raised while another exception is handled, the traceback ends here.
        self.__suppress_context__ = True

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled without the original, which may hold what cannot be pickled (urllib3's
        # connection): a copy keeps the message and the request, as a cause was never kept.
        state = {key: value for key, value in self.__dict__.items() if key != "original"}
        return type(self), self.args, state


class DeadlineExceeded(requests.exceptions.Timeout, _RedactedError):
    """The call's deadline ran out with no response at hand.

    A subclass of ``requests.Timeout``, so ``except requests.Timeout`` still catches it. Its
    message is redacted and it prints no chain; the timeout or read error the deadline cut
    short is :attr:`original`.
    """


class CircuitOpenError(requests.exceptions.ConnectionError, _RedactedError):
    """The host's circuit breaker refused the call before it touched the network.

    A subclass of ``requests.ConnectionError``: to the caller an open breaker looks like an
    unreachable host, which is what it stands for. Its message names the host alone, and it
    has no chain: :attr:`original` is None.
    """


class ThrottledError(CircuitOpenError):
    """The host's adaptive throttle refused the try locally: the host has been failing a large
    share of recent tries, and this client sends it only what it is likely to answer.

    A subclass of ``CircuitOpenError``, so ``except CircuitOpenError`` (and ``except
    requests.ConnectionError``) catch every local refusal. Its message names the host alone,
    and it has no chain: :attr:`original` is None.
    """


class ConcurrencyLimitError(CircuitOpenError):
    """The host's concurrency limit was full and no slot freed within ``limit.max_wait``: this
    client already has as many tries in flight to the host as it currently takes.

    A subclass of ``CircuitOpenError``, so ``except CircuitOpenError`` (and ``except
    requests.ConnectionError``) catch every local refusal. Its message names the host alone,
    and it has no chain: :attr:`original` is None.
    """


class HedgeCancelled(_RedactedError):
    """The try was cancelled because another try of its call answered first (hedging).

    It never reaches the caller: the call ends with the try that answered. It names the
    cancelled try in ``http.try`` events and in hooks, and its message names the host alone.
    """


class ResponseTooLarge(_RedactedError):
    """A response's body was longer than its host's ``retry.max_response_bytes``.

    Reading stopped one byte past the cap (a ``Content-Length`` over it: before the first
    byte) and the connection was closed, never handed back to the pool. With ``stream=False``
    the call raises it; with ``stream=True``, a ``Content-Length`` over the cap makes the call
    raise it, and otherwise the read that crosses the cap does (``iter_content``,
    ``iter_lines``, ``content``, ``raw.read``), as does every read after it.

    A ``requests.RequestException``: ``except requests.RequestException`` catches it. Its
    message names the status, the redacted URL and the cap; it has no chain (:attr:`original`
    is None).

    Attributes:
        limit: the cap it crossed, in bytes.
        response: the response whose body was too large: its status and headers read as
            usual, its body does not. A pickled copy leaves it behind.
    """

    limit: int = 0

    def __init__(self, *args: Any, limit: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling a response reads its body, which is what must not happen here.
        kind, args, state = super().__reduce__()
        return kind, args, {**state, "response": None}


class ConfigError(requests.exceptions.RequestException, ValueError):
    """The configuration is invalid; the message names the dotted key path and the bad value."""
