"""After ``os.fork()``: the child's adapters start with empty pools; the parent keeps its sockets.

A pooled keep-alive connection is one TCP socket in both processes after a fork. A child
that sends on it while the parent does reads the parent's answer, or the parent the child's,
and the one whose answer was taken waits out its read timeout. In the child, every live
``ResilientAdapter`` and every adapter mounted on a live ``ResilientSession`` is given new,
empty pools, as requests gives an ``HTTPAdapter`` it unpickles; the next call connects anew.

The inherited idle connections are closed in the child, which closes the child's copy of
each descriptor and sends nothing: no FIN while the parent holds its copy, and no TLS
close_notify (CPython's ``SSLSocket.close`` never calls ``SSL_shutdown``). Connections a
parent's thread had checked out at the fork are not the child's to touch.

This module is the one place that reads private attributes of requests and urllib3 for
that; tests/integration/test_fork.py fails if an upgrade removes one.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from typing import Any

import requests
from requests.adapters import HTTPAdapter

_adapters: weakref.WeakSet[HTTPAdapter] = weakref.WeakSet()
_sessions: weakref.WeakSet[requests.Session] = weakref.WeakSet()


def track_adapter(adapter: HTTPAdapter) -> None:
    """Give *adapter* fresh pools in a forked child, for as long as it lives."""
    _adapters.add(adapter)


def track_session(session: requests.Session) -> None:
    """Give every ``HTTPAdapter`` mounted on *session* fresh pools in a forked child, for as
    long as the session lives: those mounted later, and plain requests ones, included."""
    _sessions.add(session)


def renew_pools(adapter: HTTPAdapter) -> None:
    """Give *adapter* a new, empty pool manager and no proxy managers, built as when it was
    made; close the old ones' idle connections without taking their locks."""
    old = [adapter.poolmanager, *adapter.proxy_manager.values()]
    # requests' private attributes: what HTTPAdapter.__init__ built the pool manager with
    # (its __attrs__, the pickled state; its __setstate__ rebuilds the manager from them).
    adapter.init_poolmanager(
        adapter._pool_connections,  # type: ignore[attr-defined]  # private to requests
        adapter._pool_maxsize,  # type: ignore[attr-defined]
        block=adapter._pool_block,  # type: ignore[attr-defined]
    )
    adapter.proxy_manager = {}
    for manager in old:
        _close_idle(manager)


def _close_idle(manager: Any) -> None:
    # urllib3's private attributes: the manager's pools behind its container's lock, and each
    # pool's idle connections, the list behind its queue's lock. Read without either lock: one
    # a parent's thread held at the fork is held for ever in the child, where no other thread
    # runs to change them. A layout urllib3 changes leaves the sockets to the collector.
    container = getattr(getattr(manager, "pools", None), "_container", None)
    if container is None:
        return
    for pool in list(container.values()):
        idle = getattr(getattr(pool, "pool", None), "queue", None) or ()
        for conn in list(idle):
            if conn is not None:
                with contextlib.suppress(Exception):  # the child's copy only; never the call's
                    conn.close()


def _after_fork_in_child() -> None:
    adapters = {id(adapter): adapter for adapter in list(_adapters)}
    for session in list(_sessions):
        for adapter in list(session.adapters.values()):
            if isinstance(adapter, HTTPAdapter):
                adapters[id(adapter)] = adapter
    for adapter in adapters.values():
        renew_pools(adapter)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
