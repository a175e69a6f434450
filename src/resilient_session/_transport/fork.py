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

The private attributes of requests and urllib3 it needs are read through ``_compat.py``,
whose test fails if an upgrade removes one.
"""

from __future__ import annotations

import contextlib
import os
import weakref

import requests
from requests.adapters import HTTPAdapter

from resilient_session._compat import idle_connections, pool_settings

from .watched import watch_pools, watches

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
    # An adapter a session guards builds unwatched pools of its own class's making.
    watched = watches(adapter.poolmanager)
    connections, maxsize, block = pool_settings(adapter)
    adapter.init_poolmanager(connections, maxsize, block=block)
    if watched:
        watch_pools(adapter.poolmanager)
    adapter.proxy_manager = {}
    for manager in old:
        # A layout urllib3 changes leaves the sockets to the collector.
        for conn in idle_connections(manager):
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
