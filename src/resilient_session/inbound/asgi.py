"""The ASGI middleware: serves each request under the caller's deadline and retry intent."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any, Final, TypeAlias

from resilient_session.clock import SYSTEM_CLOCK, Clock
from resilient_session.config import Config, load

from .adopt import Adopter

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


class ASGIMiddleware:
    """Wrap an ASGI application so that every call it makes with this library while serving
    a request keeps within that request's caller's deadline and retry intent.

    Framework-free: Starlette and FastAPI take it with ``app.add_middleware(ASGIMiddleware)``.
    Both live in contextvars set in the request's task, so tasks it starts and sync endpoints
    the framework runs in its thread pool (which copies the context) keep them, until the last
    part of the answer is sent: background tasks run after it are not the caller's. A
    malformed header is ignored, never an error. Other scopes (lifespan, websocket) pass
    through.

    Args:
        app: the ASGI application.
        config: as for :func:`resilient_session.config.load`; ``inbound:`` and the header
            names under ``defaults.deadline`` are read.
        clock: the source of time.

    Raises:
        ConfigError: the configuration is invalid; the message names the key.
    """

    def __init__(
        self,
        app: ASGIApp,
        config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.app = app
        self._adopter = Adopter(load(config), clock)
        self._timeout_name = _header_name(self._adopter.timeout_header)
        self._attempt_name = _header_name(self._adopter.attempt_header)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or ()
        adopted = self._adopter.adopt(
            _values(headers, self._timeout_name),
            _values(headers, self._attempt_name),
            _peer(scope) if self._adopter.trusted is not None else None,
        )
        if adopted is None:
            await self.app(scope, receive, send)
            return
        tokens = adopted.enter()

        async def send_then_release(message: Message) -> None:
            await send(message)
            kind = message.get("type")
            if kind == _PATHSEND or (kind in _BODY and not message.get("more_body")):
                # The answer is complete; what the app does next (Starlette's background
                # tasks) is not for this caller.
                adopted.release(tokens)

        try:
            await self.app(scope, receive, send_then_release)
        finally:
            adopted.leave(tokens)


# The messages that carry a response's body; the last has no more_body. The pathsend
# extension's message is a whole body in itself.
_BODY: Final = frozenset({"http.response.body", "http.response.zerocopy"})
_PATHSEND: Final = "http.response.pathsend"


def _peer(scope: Scope) -> object:
    # ASGI: scope["client"] is [host, port], or None when the server does not know it (a
    # Unix socket); anything else a server puts there is no address.
    client = scope.get("client")
    if isinstance(client, list | tuple) and client:
        return client[0]
    return None


def _header_name(header: str | None) -> bytes | None:
    # ASGI: header names arrive lower-cased, as bytes.
    return None if header is None else header.lower().encode("ascii")


def _values(headers: Iterable[Any], name: bytes | None) -> list[str]:
    if name is None:
        return []
    found: list[str] = []
    for field in headers:
        try:
            key, value = field
        except (TypeError, ValueError):  # a malformed scope from a server: not ours to fail
            continue
        if isinstance(key, bytes) and key.lower() == name and isinstance(value, bytes):
            # Latin-1 maps every byte to one character; a non-ASCII one then fails the parse.
            found.append(value.decode("latin-1"))
    return found
