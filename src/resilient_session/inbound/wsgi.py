"""The WSGI middleware: serves each request under the caller's deadline and retry intent."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from resilient_session.clock import SYSTEM_CLOCK, Clock
from resilient_session.config import Config, load

from .adopt import Adopted, Adopter, Tokens

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment


class WSGIMiddleware:
    """Wrap a WSGI application so that every call it makes with this library while serving
    a request keeps within that request's caller's deadline and retry intent.

    Framework-free: Flask (``app.wsgi_app = WSGIMiddleware(app.wsgi_app)``), Django (wrap
    ``get_wsgi_application()``) and any WSGI server take it as they take any middleware. A
    malformed header is ignored, never an error. A lazy response body (a generator) is
    iterated in the same context, so a streamed body's outgoing calls keep them too; the
    server's ``close()`` comes after the answer has gone, and runs without them.

    Args:
        app: the WSGI application.
        config: as for :func:`resilient_session.config.load`; ``inbound:`` and the header
            names under ``defaults.deadline`` are read.
        clock: the source of time.

    Raises:
        ConfigError: the configuration is invalid; the message names the key.
    """

    def __init__(
        self,
        app: WSGIApplication,
        config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.app = app
        self._adopter = Adopter(load(config), clock)
        self._timeout_key = _environ_key(self._adopter.timeout_header)
        self._attempt_key = _environ_key(self._adopter.attempt_header)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        adopted = self._adopter.adopt(
            _values(environ, self._timeout_key),
            _values(environ, self._attempt_key),
            environ.get("REMOTE_ADDR"),
        )
        if adopted is None:
            return self.app(environ, start_response)
        # A context of the request's own: the body may be iterated after this returns, by
        # the server, and it must still see what the handler saw.
        context = contextvars.copy_context()
        tokens = context.run(adopted.enter)
        body = context.run(self.app, environ, start_response)
        wrapper = environ.get("wsgi.file_wrapper")
        if isinstance(body, list | tuple) or (
            isinstance(wrapper, type) and isinstance(body, wrapper)
        ):
            # Nothing left to run: handed back as is, so the server keeps its shortcuts (a
            # one-item list's Content-Length, a file wrapper's sendfile).
            return body
        return _BodyInContext(body, context, adopted, tokens)


class _BodyInContext:
    """The application's response body, iterated and closed in the request's context; closed
    once the answer has gone, so without the caller's deadline and intent."""

    def __init__(
        self, body: Iterable[bytes], context: contextvars.Context, adopted: Adopted, tokens: Tokens
    ) -> None:
        self._body = body
        self._iterator: Iterator[bytes] | None = None
        self._context = context
        self._adopted = adopted
        self._tokens = tokens

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self._iterator is None:
            self._iterator = self._context.run(iter, self._body)
        return self._context.run(next, self._iterator)

    def close(self) -> None:
        # PEP 3333: the server calls close() once, and it must reach the application's body.
        # Set in the request's own context, which is dropped afterwards: released, not reset.
        # What close runs (Flask's call_on_close, Django's request_finished) is not the caller's.
        self._context.run(self._adopted.release, self._tokens)
        close = getattr(self._body, "close", None)
        if close is not None:
            self._context.run(close)


def _environ_key(header: str | None) -> str | None:
    # PEP 3333 / CGI: a request header reaches the environ as HTTP_ + upper case, - as _.
    return None if header is None else "HTTP_" + header.upper().replace("-", "_")


def _values(environ: WSGIEnvironment, key: str | None) -> tuple[str, ...]:
    # A WSGI server joins repeated fields with a comma, which single() refuses.
    if key is None:
        return ()
    value = environ.get(key)
    return (value,) if isinstance(value, str) else ()
