"""urllib3 connections that put each try, from connect to the body's last byte, under the watchdog.

The deadline stage opens a :class:`~.watchdog.Watch` around each try of a call
with a deadline; the try's pool arms it on the connection the try is given, just before the
request goes out (urllib3's ``_validate_conn`` hook: before a new connection connects, so the
TLS handshake is covered, and before a pooled one sends a byte). When the try reads the body
(``stream=False``), the response disarms the watch as the body ends, just before urllib3 hands
the connection back to the pool, so the body's chunked framing is bounded too; a
``stream=True`` body is the caller's to bound, and its watch ends once the headers are in.

The watchdog shuts down a duplicate of the connection's socket descriptor (the "shutter"):
the same TCP socket, so a blocked read wakes, but a descriptor that only this connection
closes, after disarming, so the watchdog can never shut down a descriptor number the system
has meanwhile handed to another socket. A try that has no watch runs urllib3's own code but
for one contextvar read.

Their responses read past informational (1xx) answers to the final one
(``_transport/interim.py``): one left unread would answer the connection's next request.
"""

from __future__ import annotations

import os
import socket
from types import MethodType
from typing import Any

from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, PoolManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError
from urllib3.response import HTTPResponse

from resilient_session._compat import response_connection

from .interim import FinalResponse
from .watchdog import WATCHDOG, WATCHED, Watch

_current_watch = WATCHED.get
# urllib3's own, which HTTPSConnection inherits; called as a function, without a super() object.
_getresponse = HTTPConnection.getresponse


class _Watched(HTTPConnection):
    """What both watched connection classes add: attach the socket, disarm, and read past
    informational answers to the final one."""

    # Class defaults, so urllib3's constructors stay untouched.
    _watch: Watch | None = None
    _shutter: socket.socket | None = None
    # http.client builds each response of the connection from this class.
    response_class = FinalResponse

    def _new_conn(self) -> socket.socket:
        watch = _current_watch()
        if watch is None:
            return super()._new_conn()
        if self._watch is not watch:
            # Armed before connecting, so a deadline that passes while connecting is seen here.
            self._arm(watch)
        sock = super()._new_conn()
        shutter = sock.dup()
        if not WATCHDOG.attach(watch, shutter):
            shutter.close()
            sock.close()
            raise ConnectTimeoutError(self, f"deadline ran out connecting to {self.host}")
        self._shutter = shutter
        return sock

    def _getresponse_disarming(self) -> HTTPResponse:
        # The connection's getresponse while a watch is armed on it, set on the instance as it
        # is armed: a try without a watch calls urllib3's own, with no frame of ours.
        del self.getresponse
        watch = self._watch
        if watch is None:  # disarmed by close() in between
            return _getresponse(self)
        body = watch.body
        if body:
            # http.client closes a connection whose response will end it (Connection: close)
            # as the head ends, but the body still comes through the same socket under the
            # same watch: that close must neither disarm it nor close the shutter.
            shutter = self._shutter
            self._watch = self._shutter = None
        try:
            response = _getresponse(self)
        except BaseException as exc:
            self._watch = None
            fired = WATCHDOG.disarm(watch)
            if body:
                self._shutter = shutter
                if self.sock is None:
                    self.close()  # closed in between: its shutter goes too, once disarmed
            if fired:
                raise TimeoutError("deadline ran out before the response headers") from exc
            raise
        if body:
            # Left armed for the body: the response disarms it as the body ends, before
            # urllib3 hands this connection back to the pool.
            self._watch = watch
            self._shutter = shutter
            response.release_conn = MethodType(_release_watched, response)  # type: ignore[method-assign]
            return response
        self._watch = None
        if WATCHDOG.disarm(watch):
            # Fired as the headers came in: the socket is shut, so this response is unusable.
            response.close()
            raise TimeoutError("deadline ran out as the response headers came in")
        return response

    def close(self) -> None:
        watch = self._watch
        if watch is not None:
            self._watch = None
            self.__dict__.pop("getresponse", None)
            WATCHDOG.disarm(watch)  # first, so the shutter is never shut down once closed
        shutter = self._shutter
        if shutter is not None:
            self._shutter = None
            shutter.close()
        super().close()

    def _arm(self, watch: Watch) -> None:
        if self._watch is not None:  # a previous try's watch left armed: end it first
            WATCHDOG.disarm(self._watch)
        self._watch = watch
        self.getresponse = self._getresponse_disarming  # type: ignore[method-assign]
        shutter = self._shutter
        sock = self.sock
        if shutter is None and sock is not None:
            # A pooled connection made by a try without a deadline: duplicate it now.
            # socket() finds the family and type itself: a TLS-in-TLS SSLTransport (HTTPS through
            # an HTTPS proxy) has a descriptor but neither attribute.
            shutter = self._shutter = socket.socket(fileno=os.dup(sock.fileno()))
        WATCHDOG.arm(watch, shutter)


def _release_watched(response: HTTPResponse) -> None:
    """The response's ``release_conn`` while its body is watched: disarm, then release.

    urllib3 releases the connection as the body ends (or breaks): the watch ends first, so it
    can never fire on a connection another try has taken from the pool.
    """
    del response.release_conn  # urllib3's own from here on
    conn: Any = response_connection(response)
    watch = conn._watch if conn is not None else None
    if watch is not None:
        conn._watch = None
        if WATCHDOG.disarm(watch) or conn.sock is None:
            # Shut down by the watchdog: never pooled. Or ended by its response (Connection:
            # close), whose socket the shutter duplicates: the shutter goes with it.
            conn.close()
    response.release_conn()


class WatchedHTTPConnection(_Watched, HTTPConnection):
    """urllib3's ``HTTPConnection``, with each try under the watchdog."""


class WatchedHTTPSConnection(_Watched, HTTPSConnection):
    """urllib3's ``HTTPSConnection``, with each try (TLS handshake included) under the watchdog."""


def _watch_try(pool: HTTPConnectionPool, conn: _Watched) -> None:
    """Arm the try's watch, if it has one, on the connection it is about to use."""
    watch = _current_watch()
    if watch is not None and conn._watch is not watch:
        shutter = conn._shutter
        if shutter is not None and conn._watch is None:  # a pooled connection, as a rule
            conn._watch = watch
            conn.getresponse = conn._getresponse_disarming  # type: ignore[method-assign]
            WATCHDOG.arm(watch, shutter)
        else:
            conn._arm(watch)


class WatchedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection

    # urllib3 calls this once per request, before any byte is sent and before a new plain
    # HTTP connection connects; its own does nothing for HTTP, so a call without a deadline
    # pays no frame more than before, and one with a deadline arms without a frame between.
    _validate_conn = _watch_try  # type: ignore[assignment]


class WatchedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection

    def _validate_conn(self, conn: _Watched) -> None:  # type: ignore[override]
        _watch_try(self, conn)
        super()._validate_conn(conn)  # connects a new connection: its handshake is watched


# urllib3 writes the pool's class name into its messages ("HTTPConnectionPool(host=...): Max
# retries exceeded") and the connection's into NewConnectionError's: spelled as urllib3's own,
# an error reads as it does with plain requests, for code or people that match on its text.
for _watched, _urllib3s in (
    (WatchedHTTPConnection, HTTPConnection),
    (WatchedHTTPSConnection, HTTPSConnection),
    (WatchedHTTPConnectionPool, HTTPConnectionPool),
    (WatchedHTTPSConnectionPool, HTTPSConnectionPool),
):
    _watched.__name__ = _watched.__qualname__ = _urllib3s.__qualname__
    _watched.__module__ = _urllib3s.__module__

_WATCHED_POOLS: dict[type[HTTPConnectionPool], type[HTTPConnectionPool]] = {
    HTTPConnectionPool: WatchedHTTPConnectionPool,
    HTTPSConnectionPool: WatchedHTTPSConnectionPool,
}


_WATCHED = frozenset(_WATCHED_POOLS.values())


def watches(manager: PoolManager) -> bool:
    """True when *manager* builds watched pools (ours, or an adapter's a session guards)."""
    return any(cls in _WATCHED for cls in manager.pool_classes_by_scheme.values())


def watch_pools(manager: PoolManager) -> PoolManager:
    """Make *manager* build watched pools; pool classes of its own (SOCKS) are left as they are.

    Idempotent, and cheap once done: requests asks for its proxy manager on every proxied call.
    """
    classes = manager.pool_classes_by_scheme
    if not any(cls in _WATCHED_POOLS for cls in classes.values()):
        return manager
    manager.pool_classes_by_scheme = {
        scheme: _WATCHED_POOLS.get(cls, cls) for scheme, cls in classes.items()
    }
    return manager
