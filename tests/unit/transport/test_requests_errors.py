"""The requests wire's errors: what each of requests' and urllib3's exceptions says about a
try, and the library's exception for each refusal."""

from __future__ import annotations

import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError
from urllib3.exceptions import ProxyError as Urllib3ProxyError

from resilient_session import (
    CircuitOpenError,
    ConcurrencyLimitError,
    DeadlineExceeded,
    HedgeCancelled,
    ThrottledError,
)
from resilient_session._pipeline.reason import Reason
from resilient_session._pipeline.wire import ErrorKind, Wire
from resilient_session._transport.requests_wire import REQUESTS_WIRE

WIRE: Wire[requests.PreparedRequest, requests.Response] = (
    REQUESTS_WIRE  # mypy checks the requests wire against the protocol here
)
CONNECT, TRANSIENT, DEADLINE_CUT, OURS = (
    ErrorKind.CONNECT,
    ErrorKind.TRANSIENT,
    ErrorKind.DEADLINE_CUT,
    ErrorKind.OURS,
)


def refused() -> requests.ConnectionError:
    """A ConnectionError shaped as requests raises it for a refused connect."""
    cause = NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    return requests.ConnectionError(MaxRetryError(None, "/", cause))  # type: ignore[arg-type]


def reset() -> requests.ConnectionError:
    """A ConnectionError shaped as requests raises it for a reset after sending."""
    return requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError()))


def proxy_error(reason: Exception, url: str = "/") -> requests.exceptions.ProxyError:
    """A ProxyError shaped as requests raises it when the proxy fails: urllib3's ProxyError,
    carrying what went wrong, inside MaxRetryError."""
    cause = Urllib3ProxyError("Unable to connect to proxy", reason)
    return requests.exceptions.ProxyError(MaxRetryError(None, url, cause))  # type: ignore[arg-type]


CONNECTION_REFUSED = NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
WANTS_CREDENTIALS = OSError("Tunnel connection failed: 407 Proxy Authentication Required")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (refused(), CONNECT),
        (requests.ConnectTimeout("connect timed out"), CONNECT),
        (proxy_error(CONNECTION_REFUSED), CONNECT),
        # Refused before any proxy could answer: a 407 in the proxy's URL is no answer.
        (proxy_error(CONNECTION_REFUSED, "http://proxy.test:4070/"), CONNECT),
        (reset(), TRANSIENT),
        (requests.ConnectionError("refused"), TRANSIENT),
        (requests.ReadTimeout("slow"), TRANSIENT),
        (requests.exceptions.ChunkedEncodingError("cut"), TRANSIENT),
        (requests.exceptions.ContentDecodingError("bad gzip"), TRANSIENT),
        (requests.exceptions.ProxyError("proxy down"), TRANSIENT),
        (DeadlineExceeded("cut by the caller"), DEADLINE_CUT),
        (
            DeadlineExceeded("cut at connect", original=requests.ConnectTimeout("x")),
            DEADLINE_CUT,
        ),
        (requests.exceptions.SSLError("bad cert"), OURS),
        (requests.exceptions.InvalidURL("no"), OURS),
        (requests.exceptions.InvalidSchema("no"), OURS),
        (requests.exceptions.MissingSchema("no"), OURS),
        (requests.exceptions.InvalidHeader("no"), OURS),
        (requests.exceptions.ProxyError("407 Proxy Authentication Required"), OURS),
        (proxy_error(WANTS_CREDENTIALS), OURS),
        (ValueError("a bug of ours"), OURS),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
def test_error_kind(error, kind):
    """A refused or timed-out connect never left; a failure after sending is transient; a cut
    by the caller's deadline is its own kind; TLS, URL and proxy-credential errors are ours."""
    assert REQUESTS_WIRE.error_kind(error) is kind


def test_a_proxy_that_answered_407_did_see_the_request():
    """A proxy wanting credentials answered: not a connect failure, and never retried."""
    assert REQUESTS_WIRE.error_kind(proxy_error(WANTS_CREDENTIALS)) is not CONNECT


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (Reason.BREAKER_OPEN, CircuitOpenError),
        (Reason.THROTTLED, ThrottledError),
        (Reason.CONCURRENCY_LIMIT, ConcurrencyLimitError),
        (Reason.DEADLINE_SPENT, DeadlineExceeded),
        (Reason.DEADLINE, DeadlineExceeded),
        (Reason.HEDGE_LOST, HedgeCancelled),
    ],
)
def test_refusal_is_the_library_exception_for_its_reason(reason, kind):
    """Each reason gives its exception, exactly that class, with the message and the request;
    a refusal before any try has no original."""
    request = requests.Request("GET", "http://svc.test/items").prepare()
    error = REQUESTS_WIRE.refusal(reason, "refused: 3 tries in flight", request)
    assert type(error) is kind
    assert isinstance(error, DeadlineExceeded | CircuitOpenError | HedgeCancelled)
    assert (error.args, error.request, error.original) == (
        ("refused: 3 tries in flight",),
        request,
        None,
    )


def test_a_deadline_cut_keeps_the_timeout_it_stands_for():
    """A try the deadline cut keeps the timeout it replaced, unchained."""
    request = requests.Request("GET", "http://svc.test/items").prepare()
    timed_out = requests.ReadTimeout("Read timed out. (read timeout=0.25)")
    error = REQUESTS_WIRE.refusal(
        Reason.DEADLINE, "deadline ran out during try 2", request, original=timed_out
    )
    assert type(error) is DeadlineExceeded
    assert (error.original, error.__cause__, error.__suppress_context__) == (timed_out, None, True)
    assert REQUESTS_WIRE.error_kind(error) is DEADLINE_CUT


def test_no_refusal_for_a_reason_no_guard_refuses_for():
    """A reason that ends a sent try (here max_attempts) has no refusal: a bug, said loudly."""
    with pytest.raises(ValueError, match="'max_attempts'"):
        REQUESTS_WIRE.refusal(Reason.MAX_ATTEMPTS, "x", None)
