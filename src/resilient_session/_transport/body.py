"""Reading a response body inside the try, so the deadline covers it and a reset is retried."""

from __future__ import annotations

from typing import Any, Final

import requests
from urllib3.exceptions import DecodeError, ProtocolError, ReadTimeoutError
from urllib3.exceptions import SSLError as Urllib3SSLError

from resilient_session._compat import content_read, detached_socket, keep_content
from resilient_session._observe.redact import redact_url
from resilient_session._state.runtime import Runtime
from resilient_session.errors import DeadlineExceeded

from .watchdog import ARMED, WATCHED

_current_watch = WATCHED.get

_CHUNK = 64 * 1024

# How much of a retried response's body is read before its connection is dropped instead
# (docs/architecture.md): error bodies are small, and past this reading costs more than a
# new connection.
DRAIN_LIMIT: Final = 64 * 1024


def read_body(response: requests.Response, deadline_at: float | None, runtime: Runtime) -> None:
    """Read the whole body into ``response.content``; errors are requests' own types.

    With a deadline the body is read under the try's watch, which the watchdog fires at the
    deadline, so a body that drips in slowly, or whose chunked framing trickles, is cut there
    instead of running past it; a body no watch covers has each read bounded by what is left
    on the runtime's clock. A cut's message hides the runtime's redacted names in the URL.
    """
    if deadline_at is None or not hasattr(response.raw, "read1"):
        _ = response.content
        return
    chunks = _read(response, deadline_at, runtime, None)[0]
    keep_content(response, b"".join(chunks))


def _read(
    response: requests.Response,
    deadline_at: float | None,
    runtime: Runtime,
    limit: int | None,
) -> tuple[list[bytes], bool]:
    """The body's chunks, read one socket read at a time, and whether the body ended.

    With a *limit*, reading stops once more than *limit* bytes have come: the chunks then hold
    at most *limit* + 1 bytes, and the body did not end.
    """
    raw = response.raw
    clock = runtime.clock
    # A body read under a watch that its connection kept armed is the watchdog's to cut (the
    # framing too, which one read may take many socket reads over); any other, each read's.
    watch = _current_watch()
    bound = deadline_at is not None and (watch is None or watch.state < ARMED)
    chunks: list[bytes] = []
    size = 0
    cut: Exception | None = None
    while True:
        if deadline_at is not None:
            remaining = deadline_at - clock.monotonic()
            if remaining <= 0:
                raise body_cut(response, runtime.redact, cut)
            if bound:
                _bound_socket(raw, remaining)
        want = _CHUNK if limit is None else min(_CHUNK, limit + 1 - size)
        try:
            chunk = raw.read1(want, decode_content=True)
        except (ReadTimeoutError, ProtocolError, DecodeError, Urllib3SSLError) as exc:
            if deadline_at is None or deadline_at - clock.monotonic() > 0:
                raise _translated(exc, response) from exc
            # Timed out at the deadline, or broken there by the watchdog's shutdown: raised at
            # the top of the loop, outside this handler, so it carries no context.
            cut = exc
            continue
        if not chunk:
            return chunks, True
        chunks.append(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            return chunks, False


def _translated(exc: Exception, response: requests.Response) -> requests.RequestException:
    # The same translation requests applies in Response.iter_content.
    if isinstance(exc, ProtocolError):
        return requests.exceptions.ChunkedEncodingError(exc)
    if isinstance(exc, DecodeError):
        return requests.exceptions.ContentDecodingError(exc)
    if isinstance(exc, Urllib3SSLError):
        return requests.exceptions.SSLError(exc)
    return requests.ConnectionError(exc, response=response)


def _bound_socket(raw: Any, seconds: float) -> None:
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if sock is None:
        # A response that ends its connection (Connection: close) is detached from it as its
        # headers are read, but still reads from the socket through http.client's file.
        sock = detached_socket(raw)
    if sock is not None:
        current = sock.gettimeout()
        if current is None or current > seconds:
            sock.settimeout(seconds)


def body_cut(
    response: requests.Response, names: frozenset[str], cut: Exception | None = None
) -> DeadlineExceeded:
    """Close *response* and say that the deadline ran out while its body was read; *cut* is
    the read error the deadline caused, kept unprinted as the exception's ``original``."""
    response.close()
    return DeadlineExceeded(
        f"deadline ran out while reading the body of {response.status_code} from "
        f"{redact_url(response.url or '', names)}",
        request=response.request,
        original=cut,
    )


def drain(response: requests.Response, deadline_at: float | None, runtime: Runtime) -> None:
    """Read at most ``DRAIN_LIMIT`` bytes of a response that will be retried, then close it.

    A body that ends within the bound is kept, as requests keeps it when it follows a
    redirect, and the connection goes back to the pool. A longer body is cut: its first
    ``DRAIN_LIMIT`` bytes are kept and the connection is closed rather than read to the end.
    Either way the response still reads normally (``content``, ``iter_content``) if it later
    becomes the call's result. Raises DeadlineExceeded when the body outlasts the deadline.
    """
    try:
        if not content_read(response):
            if not hasattr(response.raw, "read1"):
                _ = response.content  # not urllib3's: no bounded read to be had
            else:
                chunks, ended = _read(response, deadline_at, runtime, DRAIN_LIMIT)
                if not ended:
                    # The rest stays unread, so the connection cannot be reused: drop it.
                    response.raw.close()
                    chunks = [b"".join(chunks)[:DRAIN_LIMIT]]
                keep_content(response, b"".join(chunks))
    except DeadlineExceeded:
        raise
    except requests.RequestException:
        pass  # A broken body on a response being retried changes nothing.
    finally:
        response.close()
