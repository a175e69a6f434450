"""Reading a response body inside the try, so the deadline covers it and a reset is retried."""

from __future__ import annotations

from typing import Any

import requests
from urllib3.exceptions import DecodeError, ProtocolError, ReadTimeoutError
from urllib3.exceptions import SSLError as Urllib3SSLError

from .clock import Clock
from .errors import DeadlineExceeded
from .redact import redact_url

_CHUNK = 64 * 1024


def read_body(response: requests.Response, deadline_at: float | None, clock: Clock) -> None:
    """Read the whole body into ``response.content``; errors are requests' own types.

    With a deadline the body is read one socket read at a time, each bounded by what is left,
    so a body that drips in slowly is cut at the deadline instead of running past it.
    """
    raw = response.raw
    if deadline_at is None or not hasattr(raw, "read1"):
        _ = response.content
        return
    chunks: list[bytes] = []
    while True:
        remaining = deadline_at - clock.monotonic()
        if remaining <= 0:
            raise _exceeded(response)
        _bound_socket(raw, remaining)
        try:
            chunk = raw.read1(_CHUNK, decode_content=True)
        except ReadTimeoutError as exc:
            if deadline_at - clock.monotonic() <= 0:
                raise _exceeded(response) from exc
            raise requests.ConnectionError(exc, response=response) from exc
        # The same translation requests applies in Response.iter_content.
        except ProtocolError as exc:
            raise requests.exceptions.ChunkedEncodingError(exc) from exc
        except DecodeError as exc:
            raise requests.exceptions.ContentDecodingError(exc) from exc
        except Urllib3SSLError as exc:
            raise requests.exceptions.SSLError(exc) from exc
        if not chunk:
            break
        chunks.append(chunk)
    # What requests' own Response.content leaves behind after reading.
    response._content = b"".join(chunks)
    response._content_consumed = True  # type: ignore[attr-defined]  # private in the stubs


def _bound_socket(raw: Any, seconds: float) -> None:
    connection = getattr(raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        current = sock.gettimeout()
        if current is None or current > seconds:
            sock.settimeout(seconds)


def _exceeded(response: requests.Response) -> DeadlineExceeded:
    response.close()
    return DeadlineExceeded(
        f"deadline ran out while reading the body of {response.status_code} from "
        f"{redact_url(response.url or '')}",
        request=response.request,
    )


def drain(response: requests.Response, deadline_at: float | None, clock: Clock) -> None:
    """Read what is left of a response that will be retried, then close it.

    Reading to the end returns the connection to the pool, and keeps the body, as requests
    does when it follows a redirect, so the response still reads normally if it later becomes
    the call's result. Raises DeadlineExceeded when the body outlasts the deadline.
    """
    try:
        if not getattr(response, "_content_consumed", True):
            read_body(response, deadline_at, clock)
    except DeadlineExceeded:
        raise
    except requests.RequestException:
        pass  # A broken body on a response being retried changes nothing.
    finally:
        response.close()
