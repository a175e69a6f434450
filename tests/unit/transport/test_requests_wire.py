"""The requests wire's errors: what each of requests' and urllib3's exceptions says about a
try."""

from __future__ import annotations

import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError
from urllib3.exceptions import ProxyError as Urllib3ProxyError

from resilient_session import DeadlineExceeded
from resilient_session._pipeline.wire import ErrorKind, Wire
from resilient_session._transport.requests_wire import REQUESTS_WIRE

WIRE: Wire = REQUESTS_WIRE  # mypy checks the requests wire against the protocol here
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
